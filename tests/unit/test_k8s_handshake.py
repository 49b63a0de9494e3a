"""A refused WebSocket upgrade (exec, port-forward) is one sentence with the API server's own
message: websocket-client's "Handshake status ..." text is read for its Status body in both the
form it has now and the ``b'...'`` form of older versions, and a 403 with no reason (the API
server's extra check for create on the upgrade) says what is missing."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from raychaos.errors import KubeApiError, TargetUnavailable
from raychaos.targets.kubernetes.client import WS_CREATE_HINT, translated

pytestmark = pytest.mark.unit

HEADERS = "{'audit-id': '5f95d169', 'content-type': 'application/json'}"
STATUS = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
          '"pods \\"demo-head-5wn7z\\" is forbidden: ","reason":"Forbidden","code":403}')


def _refused(text: str) -> KubeApiError:
    with pytest.raises(KubeApiError) as err, translated("https://127.0.0.1:6443",
                                                        "exec in ray/demo-head-5wn7z"):
        raise ApiException(status=0, reason=text)
    return err.value


@pytest.mark.parametrize("body", [STATUS, f"b'{STATUS}'"])
def test_a_refused_upgrade_names_the_status_message_and_what_create_is_for(body):
    err = _refused(f"Handshake status 403 Forbidden -+-+- {HEADERS} -+-+- {body}")
    assert err.status == 403
    assert str(err) == (f'exec in ray/demo-head-5wn7z: HTTP 403 Forbidden: pods '
                        f'"demo-head-5wn7z" is forbidden: {WS_CREATE_HINT}')


def test_a_403_with_a_reason_is_left_as_the_api_server_said_it():
    body = STATUS.replace("is forbidden: ", 'is forbidden: User \\"x\\" cannot get resource')
    err = _refused(f"Handshake status 403 Forbidden -+-+- {HEADERS} -+-+- {body}")
    assert str(err).endswith('forbidden: User "x" cannot get resource') and "\n" not in str(err)


def test_another_status_without_a_body_is_its_reason_and_no_upgrade_is_unavailable():
    assert str(_refused("Handshake status 500 Internal Server Error")).endswith(
        "HTTP 500 Internal Server Error: Internal Server Error")
    with pytest.raises(TargetUnavailable, match="the WebSocket did not open: Connection"), \
            translated("https://127.0.0.1:6443", "port-forward"):
        raise ApiException(status=0, reason="Connection to remote host was lost.")
