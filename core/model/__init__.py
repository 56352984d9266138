"""The OpenAI-compatible model client."""
