"""The front door of core/: the only modules that bot/ and cli/ import.

Each module re-exports one area (runs, sessions, packages, stores, checkout, tools, errors,
events), so the engine's sub-packages can move behind it without touching a surface.
"""
