from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    # The demo opens onto the outbox dashboard.
    path("", RedirectView.as_view(url="/admin/django_outbox/dashboard/")),
    path("admin/", admin.site.urls),
    path("", include("testproject.shop.urls")),
]
