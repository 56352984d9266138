"""Helpers the tests share: fakes of Slack and the model, harnesses, real-process and repository helpers."""
