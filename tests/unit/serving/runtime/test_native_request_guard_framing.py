"""serving/runtime/native/request_guard.c's HTTP scan (JSON nesting) against a client whose headers Triton
2.51 reads differently: Triton takes the FIRST of repeated headers (evhtp_kv_find). The guard is preloaded
into a small program named tritonserver that accepts one connection on --http-port and prints what its
reads returned, i.e. what Triton's parser would get."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import textwrap

import pytest

from serving.runtime.native import REQUEST_GUARD, build_helper

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler on PATH")

ECHO_SERVER = textwrap.dedent("""
    #include <arpa/inet.h>
    #include <errno.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <sys/socket.h>
    #include <unistd.h>
    int main(int argc, char **argv) {
        int port = atoi(strchr(argv[1], '=') + 1), one = 1;
        int listener = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons(port) };
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(listener, (struct sockaddr *)&address, sizeof address) || listen(listener, 1)) return 2;
        printf("ready\\n"); fflush(stdout);
        int fd = accept(listener, NULL, NULL);
        static char buffer[1 << 16];
        for (;;) {
            ssize_t n = read(fd, buffer, sizeof buffer);
            if (n < 0) { printf("\\nRESET %d\\n", errno); break; }
            if (n == 0) break;
            fwrite(buffer, 1, (size_t)n, stdout);
        }
        return 0;
    }
""")


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    directory = tmp_path_factory.mktemp("guard_framing")
    library, what = build_helper(REQUEST_GUARD, directory / "librequest_guard.so")
    assert library, what
    (directory / "echo.c").write_text(ECHO_SERVER)
    program = directory / "tritonserver"
    subprocess.run([shutil.which("cc") or "gcc", "-o", str(program), str(directory / "echo.c")], check=True)

    def send(headers: bytes, body: bytes) -> bytes:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {**os.environ, "LD_PRELOAD": str(library), "SERVING_REQUEST_GUARD": "on"}
        server = subprocess.Popen([str(program), f"--http-port={port}"], stdout=subprocess.PIPE, env=env)
        try:
            assert server.stdout.readline() == b"ready\n"
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n" + body)
                client.shutdown(socket.SHUT_WR)
            return server.communicate(timeout=10)[0]
        finally:
            server.kill()
    return send


DEEP = b'{"inputs":' + b"[" * 2000 + b"]" * 2000 + b"}"
LENGTH = str(len(DEEP)).encode()


def refused(seen: bytes) -> bool:
    """The deep body did not reach the parser whole: a level past 1024 replaced with '#', or the connection reset."""
    return b"\nRESET " in seen or b"[" * 1023 + b"#" in seen


def test_a_deep_body_is_cut_short(echo):
    assert refused(echo(b"Content-Length: " + LENGTH + b"\r\n", DEEP))


@pytest.mark.parametrize("headers", [
    b"Inference-Header-Content-Length: " + LENGTH + b"\r\nInference-Header-Content-Length: 0\r\n",
    b"Content-Encoding: identity\r\nContent-Encoding: gzip\r\n",
], ids=["json-length-then-0", "identity-then-gzip"])
def test_a_repeated_header_that_triton_reads_first_does_not_hide_a_deep_body(echo, headers):
    """Triton 2.51 parsed these bodies' JSON (the first header's word) while the scan believed the second
    (no JSON part; a compressed body): a 5 MB body of '[' then killed the server with SIGSEGV."""
    assert refused(echo(b"Content-Length: " + LENGTH + b"\r\n" + headers, DEEP))


def test_the_python_backends_ipc_regions_are_the_owners_only(tmp_path):
    """boost::interprocess creates the Python backend's /dev/shm/triton_* regions 0644 (fchmod after
    shm_open, past the umask): every request and response was readable by every local user."""
    library, what = build_helper(REQUEST_GUARD, tmp_path / "librequest_guard.so")
    assert library, what
    name = f"/triton_python_backend_shm_region_test_{os.getpid()}"
    (tmp_path / "region.c").write_text(textwrap.dedent(f"""
        #include <fcntl.h>
        #include <stdio.h>
        #include <sys/mman.h>
        #include <sys/stat.h>
        int main(void) {{
            int fd = shm_open("{name}", O_RDWR | O_CREAT | O_EXCL, 0644);
            if (fd < 0) return 2;
            fchmod(fd, 0644);
            struct stat info;
            fstat(fd, &info);
            shm_unlink("{name}");
            printf("%o\\n", info.st_mode & 0777);
            return 0;
        }}
    """))
    program = tmp_path / "tritonserver"
    subprocess.run([shutil.which("cc") or "gcc", "-o", str(program), str(tmp_path / "region.c")], check=True)
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "LD_PRELOAD": str(library)})
    assert done.returncode == 0 and done.stdout.strip() == "600"
