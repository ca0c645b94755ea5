from django.urls import path

from testproject.shop import views

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("orders/", views.place_order, name="place-order"),
]
