"""Checkouts: the git project a run works on, and delivering its changes."""

from __future__ import annotations

from ..checkout.project import Author, Checkout, CheckoutSpec, GitSettings
from ..checkout.delivery import Delivery
from ..checkout.pull_requests import ForgeSettings, PullRequestAsk, PullRequestResult, open_pull_request
from ..checkout.urls import scrub

__all__ = [
    "Author", "Checkout", "CheckoutSpec", "Delivery", "ForgeSettings", "GitSettings", "PullRequestAsk",
    "PullRequestResult", "open_pull_request", "scrub",
]
