"""A tiny locustfile for the runner tests: one success endpoint and one failing one."""

from locust import HttpUser, constant, task


class TinyUser(HttpUser):
    wait_time = constant(0.05)

    @task(4)
    def ok(self):
        self.client.get("/ok")

    @task(1)
    def fail(self):
        self.client.get("/fail")
