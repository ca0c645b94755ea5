"""URLs django_outbox offers to include: ``path("outbox/", include("django_outbox.urls"))``."""

from django.urls import path

from django_outbox.views import health_view

app_name = "django_outbox"

urlpatterns = [path("health/", health_view, name="health")]
