"""The run loop: composing each model call, running its tools, and what a run reports."""
