"""Parking: an engine put to sleep instead of stopped, woken instead of started cold, and the known
answer that proves a wake."""
