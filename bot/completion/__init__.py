"""What a finished run offers: its files, Commit & push, and feedback."""
