from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    # The demo opens onto the outbox dashboard.
    path("", RedirectView.as_view(url="/admin/django_outbox/dashboard/")),
    path("admin/", admin.site.urls),
    # GET /outbox/health/: outbox_health's figures as JSON (staff, or OUTBOX["HEALTH"]["TOKEN"]).
    path("outbox/", include("django_outbox.urls")),
    # The webhook portal and its API (/webhooks/api/v1/): docs/portal.md.
    path("webhooks/", include("django_outbox.portal.urls")),
    path("", include("testproject.shop.urls")),
]
