from django_outbox.models.jobs import Job, JobStatus, Worker

__all__ = ["Job", "JobStatus", "Worker"]
