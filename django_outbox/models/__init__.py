from django_outbox.models.jobs import Job, JobStatus, Worker
from django_outbox.models.webhooks import Attempt, Delivery, DeliveryStatus, Endpoint, Message

__all__ = [
    "Attempt",
    "Delivery",
    "DeliveryStatus",
    "Endpoint",
    "Job",
    "JobStatus",
    "Message",
    "Worker",
]
