"""Bench locustfile: FastHttpUser hammering one GET with no wait, to measure Locust's ceiling."""

from locust import FastHttpUser, task


class Hammer(FastHttpUser):
    @task
    def get(self):
        self.client.get("/bench")
