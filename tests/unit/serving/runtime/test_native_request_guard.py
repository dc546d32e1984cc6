"""serving/runtime/native/request_guard.c, compiled here and preloaded into a small program named
tritonserver: the admin key it puts back into the arguments (serving.runtime.security.
keep_key_off_command_line). Its request checks on a real tritonserver: tests/integration/test_isolation.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest

from serving.runtime.native import REQUEST_GUARD, build_helper

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler on PATH")

SHOW_ARGUMENTS = textwrap.dedent("""
    #define _GNU_SOURCE
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    int main(int argc, char **argv) {
        char cmdline[4096] = {0}, environ_block[1 << 16] = {0};
        FILE *f = fopen("/proc/self/cmdline", "rb");
        size_t n = f ? fread(cmdline, 1, sizeof cmdline - 1, f) : 0;
        for (size_t i = 0; i < n; i++) if (!cmdline[i]) cmdline[i] = ' ';
        FILE *e = fopen("/proc/self/environ", "rb");
        size_t m = e ? fread(environ_block, 1, sizeof environ_block, e) : 0;
        /* the key is SHOW_KEY_LENGTH times SHOW_KEY_CHAR: built here, so the variable naming it does not hold it */
        const char *c = getenv("SHOW_KEY_CHAR"), *length = getenv("SHOW_KEY_LENGTH");
        char key[512] = "SERVING_ARGV_SECRET=";
        size_t at = strlen(key), count = length ? (size_t)atoi(length) : 0;
        for (size_t i = 0; c && i < count && at < sizeof key - 1; i++) key[at++] = *c;
        printf("%s\\n%s\\n%s\\n%s\\n", argc > 1 ? argv[1] : "", cmdline, getenv("SERVING_ARGV_SECRET") ? "env" : "no env",
               c && memmem(environ_block, m, key, at) ? "key in environ" : "no key in environ");
        return 0;
    }
""")


def test_the_server_reads_the_key_where_proc_cmdline_shows_the_decoy(tmp_path):
    library, what = build_helper(REQUEST_GUARD, tmp_path / "librequest_guard.so")
    assert library, what
    (tmp_path / "show.c").write_text(SHOW_ARGUMENTS)
    program = tmp_path / "tritonserver"
    subprocess.run([shutil.which("cc") or "gcc", "-o", str(program), str(tmp_path / "show.c")], check=True)
    key, decoy = "K" * 43, "D" * 43
    env = {**os.environ, "LD_PRELOAD": str(library), "SERVING_ARGV_DECOY": decoy, "SERVING_ARGV_SECRET": key,
           "SHOW_KEY_CHAR": "K", "SHOW_KEY_LENGTH": "43"}
    done = subprocess.run([str(program), f"--http-restricted-api=model-repository:admin-key={decoy}"],
                          capture_output=True, text=True, env=env, timeout=30)
    argument, cmdline, environment, block = done.stdout.splitlines()
    assert argument == f"--http-restricted-api=model-repository:admin-key={key}"
    assert decoy in cmdline and key not in cmdline and environment == "no env"
    # /proc/<pid>/environ shows the original environment block, which unsetenv leaves as it was: anything of
    # the server's user (in a pod, every model's code) read the key there (a review, 2026-12-06)
    assert block == "no key in environ"


def test_only_a_guard_that_restores_the_key_gets_a_decoy_on_the_command_line(tmp_path):
    """A request guard built before the key was kept off the command line (kept by a failed rebuild,
    or no `make setup` since) passes the decoy to Triton, which then refuses the real key."""
    from serving.runtime.native import restores_argv_secret

    library, what = build_helper(REQUEST_GUARD, tmp_path / "librequest_guard.so")
    assert library, what
    assert restores_argv_secret(library)
    (tmp_path / "older.c").write_text("int TRITONSERVER_ServerInferAsync(void) { return 0; }\n")
    older = tmp_path / "older.so"
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(older), str(tmp_path / "older.c")], check=True)
    assert not restores_argv_secret(older) and not restores_argv_secret(tmp_path / "missing.so")


def test_a_pods_command_gives_the_server_the_secrets_key_where_proc_cmdline_shows_the_decoy(tmp_path):
    """A pod runs `sh -c '... exec tritonserver "$@"'` with the container's LD_PRELOAD, so the guard is
    loaded into the shell too: it must leave the key's variables to the server (it dropped them in every
    process, and Triton then got the decoy). Until 2026-12-06 the kubelet expanded the key into the
    arguments, where /proc/1/cmdline shows it to every process of the node. A key of another form stops
    the pod with a message, as the host's launcher refuses it."""
    from k8s_deploy.workload import ARGV_KEY_DECOY, SERVER_COMMAND

    library, what = build_helper(REQUEST_GUARD, tmp_path / "librequest_guard.so")
    assert library, what
    (tmp_path / "show.c").write_text(SHOW_ARGUMENTS)
    subprocess.run([shutil.which("cc") or "gcc", "-o", str(tmp_path / "tritonserver"), str(tmp_path / "show.c")], check=True)
    flag = f"--http-restricted-api=model-repository:admin-key={ARGV_KEY_DECOY}"

    def pod(secret: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "LD_PRELOAD": str(library),
               "SERVING_ARGV_DECOY": ARGV_KEY_DECOY, "SERVING_ARGV_SECRET": secret, "SHOW_KEY_CHAR": "k",
               "SHOW_KEY_LENGTH": "43"}
        return subprocess.run([*SERVER_COMMAND, flag], capture_output=True, text=True, env=env, timeout=30)

    key = "k" * 43
    done = pod(key)
    assert done.returncode == 0, done.stderr
    argument, cmdline, environment, block = done.stdout.splitlines()
    assert argument == f"--http-restricted-api=model-repository:admin-key={key}"
    assert ARGV_KEY_DECOY in cmdline and key not in cmdline and environment == "no env"
    assert block == "no key in environ"  # /proc/1/environ: model code runs as the server's user
    for bad in ("short", "k" * 30 + ",x", "k" * 257, ""):
        done = pod(bad)
        assert done.returncode == 1 and not done.stdout, (bad, done.stdout)
        assert "must be 24-256 characters of A-Z a-z 0-9 _ -" in done.stderr, done.stderr
