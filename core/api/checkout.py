"""Checkouts: the git project a run works on, and delivering its changes."""

from __future__ import annotations

from ..checkout.project import Author, Checkout, CheckoutSpec, GitSettings
from ..checkout.delivery import Delivery
from ..checkout.urls import scrub

__all__ = ["Author", "Checkout", "CheckoutSpec", "Delivery", "GitSettings", "scrub"]
