"""`shell_run`: commands the model asks for, checked by the operator's policy and run in a sandbox."""
