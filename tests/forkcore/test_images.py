"""Docker images as workspaces (forkcore.images) against a real dockerd the tests start (forkcore.dockerd: its own
data root and socket, no bridge, no iptables; stopped and its files removed after). The image is the stand-in
shopping image (nginx + PHP-FPM + MariaDB from Debian's packages, envs/webarena/standin_image.py), built once
with mmdebstrap and `docker import`ed with --change; one workspace is started per session and forked per test."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkcore import Workspace
from forkcore.images import IMAGE_ROOT, ImageError, image_config, image_layer, image_spec

pytestmark = [pytest.mark.criu, pytest.mark.docker, pytest.mark.slow]

_SHOP = """
import http.cookiejar, json, sys, urllib.parse, urllib.request
opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
def call(path, form=None):
    data = None if form is None else urllib.parse.urlencode(form).encode()
    with opener.open("http://127.0.0.1" + path, data, timeout=30) as r:
        return {"status": r.status, "url": r.geturl(), "body": r.read().decode()}
call("/customer/account/loginPost/", {"login[username]": "emma.lopez@hotmail.com", "login[password]": "Password.123"})
print(json.dumps(call(sys.argv[1], json.loads(sys.argv[2]))))
"""


def call(ws, path: str, form: dict | None = None) -> dict:
    """GET `path` (POST `form`) on the shop, signed in as its customer."""
    r = ws.exec(["python3", "-c", _SHOP, path, json.dumps(form)], timeout=60)
    assert r["returncode"] == 0, r["stderr"][-2000:]
    return json.loads(r["stdout"])


def order(ws, product: int, qty: int = 1) -> None:
    assert call(ws, "/order.php", {"product": product, "qty": qty})["url"].endswith("/orders.php")


def summary(ws) -> str:
    body = call(ws, "/orders.php")["body"]
    return body.split('<p id="summary">')[1].split("</p>")[0]


@pytest.fixture(scope="session")
def shop(dockerd, standin):
    """The stand-in shop running as a workspace, one order placed, snapshotted."""
    ws = Workspace.start(image_spec(standin, client=dockerd.client), timeout=300)
    try:
        order(ws, 2)
        snap = ws.snapshot()
    finally:
        ws.destroy()
    yield snap
    snap.release()


def test_the_image_config_becomes_the_workspace_service(dockerd, standin):
    cfg = image_config(standin, dockerd.client)
    assert cfg.entrypoint == ("/opt/standin/start.sh",) and cfg.exposed_tcp_ports == (80,)
    assert cfg.workdir == "/var/www/shop" and cfg.user == "root" and ("SHOP_NAME", "stand-in") in cfg.env
    (svc,) = image_spec(standin, client=dockerd.client).services
    assert svc.root == IMAGE_ROOT and svc.ready == "tcp:80" and svc.argv == cfg.entrypoint
    assert svc.cwd == "/var/www/shop" and svc.user == "root" and ("SHOP_NAME", "stand-in") in svc.env


def test_an_image_of_the_same_filesystem_reuses_its_layer(dockerd, standin):
    """Every `docker import` makes a new image id; the exported layer is named by content, so the same tar
    imported again (here under another config) is not exported again (each test session imports it anew)."""
    from envs.webarena.standin_image import rootfs_tar

    with open(rootfs_tar(progress=False), "rb") as f:
        dockerd.client.api.import_image_from_data(f, repository="bunshin/reimport", tag="1", changes=['CMD ["x"]'])
    again = image_config("bunshin/reimport:1", dockerd.client)
    assert again.id != image_config(standin, dockerd.client).id and again.cmd == ("x",)
    assert image_layer("bunshin/reimport:1", dockerd.client) == image_layer(standin, dockerd.client)


def test_a_clone_continues_from_the_sources_database_and_clones_are_isolated(shop):
    a, b = shop.fork(2)
    try:
        assert summary(a) == summary(b) == "1 orders, total $89.50"  # the source's order, in MariaDB's memory
        order(a, 1)
        assert summary(a) == "2 orders, total $338.50"
        assert summary(b) == "1 orders, total $89.50"
        order(b, 3, qty=2)
        assert summary(b) == "2 orders, total $115.48" and summary(a) == "2 orders, total $338.50"
    finally:
        a.destroy()
        b.destroy()


def test_the_images_processes_see_its_filesystem_and_the_workspace_stays_the_projects(shop):
    (ws,) = shop.fork(1)
    try:
        pids = ws.exec(["pgrep", "-x", "nginx|mariadbd|php-fpm.*"])["stdout"].split()
        assert len(pids) >= 4, pids  # nginx master + worker, mariadbd, php-fpm master + workers
        uids = {pid: int(ws.exec(["ps", "-o", "uid=", "-p", pid])["stdout"]) for pid in pids}
        for pid in (p for p, uid in uids.items() if uid == 0):  # others' roots need CAP_SYS_PTRACE to read
            assert ws.exec(["readlink", f"/proc/{pid}/root"])["stdout"].strip() == IMAGE_ROOT
        passwd = {line.split(":")[0]: int(line.split(":")[2])
                  for line in ws.exec(["cat", f"{IMAGE_ROOT}/etc/passwd"])["stdout"].splitlines()}
        # the image's own users (by its /etc/passwd, not the workspace's), dumped and restored
        assert {0, passwd["www-data"], passwd["mysql"]} <= set(uids.values()), (uids, passwd)
        assert ws.exec(["test", "-x", f"{IMAGE_ROOT}/usr/sbin/nginx"])["returncode"] == 0
        assert ws.exec(["test", "-e", "/usr/sbin/nginx"])["returncode"] != 0, "the image shadowed the workspace"
        mounts = {line.split()[4]: line.split()[5] for line in ws.exec(["cat", "/proc/self/mountinfo"])["stdout"].splitlines()}
        for path in ("/proc/keys", "/proc/sys"):  # the image's /proc is hardened like the workspace's
            assert path in mounts and IMAGE_ROOT + path in mounts, path
        assert mounts[IMAGE_ROOT + "/proc/sys"].startswith("ro"), mounts[IMAGE_ROOT + "/proc/sys"]
    finally:
        ws.destroy()


def test_images_a_workspace_cannot_run_fail_clearly(dockerd, standin, monkeypatch):
    with pytest.raises(ImageError, match="not in the Docker daemon"):
        image_spec("bunshin/no-such-image:1", client=dockerd.client)
    with pytest.raises(ImageError, match="privileged"):
        image_spec(standin, client=dockerd.client, argv=["/sbin/init"])
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ImageError, match="no Docker daemon answers at unix:///nonexistent"):
        image_spec(standin)
