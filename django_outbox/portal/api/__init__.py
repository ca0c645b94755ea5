"""The portal's JSON API, ``api/v1/``: plain Django views, JSON in and out, errors as
problem details. ``base.route`` wraps each URL's handlers: the tenant, CSRF, the rate
limit, the database, and the problems raised on the way."""
