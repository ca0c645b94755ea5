"""The job engine: enqueue, claim, run outcomes, completion, leases. No HTTP here."""
