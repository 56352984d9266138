"""The floor of core/: errors, events, safe YAML and frontmatter, nesting limits, atomic files, the
typed answers to a run's questions and the prompt wrappers. Everything in core/ may import it; it
imports nothing else of core/."""
