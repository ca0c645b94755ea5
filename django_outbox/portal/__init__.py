"""The webhook portal: what an application's customers use to manage their own endpoints,
each seeing only its own tenant's rows (docs/portal.md).

Mount it with ``path("webhooks/", include("django_outbox.portal.urls"))``: its JSON API is
under ``api/v1/``. ``tenancy`` decides who the tenant is, ``scoping`` is the only way its
views reach rows, ``api/`` holds the views.
"""
