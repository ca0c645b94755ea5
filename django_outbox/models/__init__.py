from django_outbox.models.jobs import Dashboard, Job, JobStatus, Worker
from django_outbox.models.limits import LimitKey, RateBucket
from django_outbox.models.queues import QueueState
from django_outbox.models.schedules import ScheduleState
from django_outbox.models.webhooks import (
    Attempt,
    Delivery,
    DeliveryStatus,
    Endpoint,
    EndpointHour,
    Message,
    SignatureScheme,
)
from django_outbox.models.workflows import (
    Receives,
    Workflow,
    WorkflowEdge,
    WorkflowStatus,
    WorkflowStep,
)

__all__ = [
    "Attempt",
    "Dashboard",
    "Delivery",
    "DeliveryStatus",
    "Endpoint",
    "EndpointHour",
    "Job",
    "JobStatus",
    "LimitKey",
    "Message",
    "QueueState",
    "RateBucket",
    "Receives",
    "ScheduleState",
    "SignatureScheme",
    "Worker",
    "Workflow",
    "WorkflowEdge",
    "WorkflowStatus",
    "WorkflowStep",
]
