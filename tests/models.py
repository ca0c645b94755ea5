"""Tables the test tasks write to, so tests can see what really ran."""

from django.db import models


class Execution(models.Model):
    """One row per run of a recording task: which job, which attempt, when, where."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    worker = models.CharField(max_length=100)
    key = models.CharField(max_length=100, blank=True)
    started = models.DateTimeField()
    finished = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job_id", "attempt"], name="one_row_per_attempt")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}"


class Once(models.Model):
    """A key may be inserted once: a second run of the same job fails loudly."""

    key = models.CharField(max_length=100, unique=True)

    def __str__(self) -> str:
        return self.key
