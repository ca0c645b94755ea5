"""The bottom layer: small helpers that import nothing else of django_outbox and nothing of
Django, so every other layer, settings included, may use them (docs/architecture.md).

- ``text``: numbers and durations as people read them, for messages.
- ``rate``: a rate limit's numbers.
- ``resultids``: how a job's result id is written and read.
"""
