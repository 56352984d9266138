"""The top of bot/: the Bolt listeners and the wiring that builds and runs the whole bot."""
