"""servers/common.py bounds the request headers of every server (MAX_HEADER_BYTES): uvicorn's
httptools parser has no limit of its own and answered a 200 kB header with 200 OK."""

import requests

from servers.common import MAX_HEADER_BYTES


def test_a_200_kB_header_gets_431_and_a_normal_request_200(start_server):
    url = start_server("tests.hang_server").url  # build_app's middleware, as every server has it
    big = requests.get(url + "/", headers={"X-Pad": "a" * 200_000}, timeout=30)
    assert big.status_code == 431 and str(MAX_HEADER_BYTES) in big.json()["error"]
    r = requests.post(url + "/create", json={}, headers={"X-Pad": "a" * (MAX_HEADER_BYTES // 2)}, timeout=30)
    assert r.status_code == 200 and isinstance(r.json()["id"], int)  # under the bound: served
    assert requests.get(url + "/", timeout=30).status_code == 200  # and the server goes on
    many = {f"X-H{i}": "b" * 100 for i in range(MAX_HEADER_BYTES // 100 + 10)}  # many small ones add up
    assert requests.post(url + "/create", json={}, headers=many, timeout=30).status_code == 431
