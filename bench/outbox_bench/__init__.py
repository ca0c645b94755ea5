"""Benchmark workloads for ``manage.py outbox_bench``. They print figures; nothing here
asserts a speed."""
