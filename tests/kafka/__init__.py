"""Tests against a real Kafka broker (fixtures in conftest.py)."""
