"""The run's state document (Document-as-State) and the YAML it is written in."""
