from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "django_outbox"
    label = "django_outbox"
    verbose_name = "Outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_outbox import checks  # registers the system checks

        checks.quiet_stood_in_warnings()
