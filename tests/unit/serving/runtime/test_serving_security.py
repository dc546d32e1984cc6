"""The admin key (where it may come from, how it is stored, that it is never shown), the restricted
API flags, the loopback rule, and path checks on configuration (no path traversal)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from contracts.errors import ConfigError, SecurityError
from serving.runtime.security import (
    ADMIN_KEY_ENV,
    ADMIN_KEY_FILE_ENV,
    AdminKey,
    check_bind_host,
    create_admin_key_file,
    load_admin_key,
    one_off_admin_key,
    redact_restricted_flags,
    restricted_api_flags,
)
from serving.runtime.server import ServerSettings

KEY = "k" * 20 + "_-AZaz09"  # 28 URL-safe characters


@pytest.fixture
def repo_root(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    return root


def test_environment_variable_wins_and_the_key_never_appears_in_repr(tmp_path, repo_root):
    key = load_admin_key({ADMIN_KEY_ENV: KEY}, key_file=tmp_path / "absent", repo_root=repo_root)
    assert key.value == KEY and key.source == f"environment variable {ADMIN_KEY_ENV}"
    assert KEY not in repr(key) and KEY not in str(key)


def test_no_environment_and_no_file_means_no_key(tmp_path, repo_root):
    assert load_admin_key({}, key_file=tmp_path / "absent", repo_root=repo_root) is None


def test_created_key_file_is_0600_outside_the_repo_and_loads(tmp_path, repo_root):
    path = tmp_path / "config" / "admin-key"
    created_path, created = create_admin_key_file(path, {}, repo_root)
    assert created and created_path == path.resolve()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    key = load_admin_key({}, key_file=path, repo_root=repo_root)
    assert key is not None and len(key.value) >= 40 and key.value not in repr(key)
    # a second run keeps the existing key
    assert create_admin_key_file(path, {}, repo_root) == (path.resolve(), False)
    assert load_admin_key({}, key_file=path, repo_root=repo_root).value == key.value


def test_key_file_location_comes_from_its_environment_variable(tmp_path, repo_root):
    path = tmp_path / "elsewhere" / "key"
    create_admin_key_file(None, {ADMIN_KEY_FILE_ENV: str(path)}, repo_root)
    assert path.exists()
    assert load_admin_key({ADMIN_KEY_FILE_ENV: str(path)}, repo_root=repo_root).source == f"file {path.resolve()}"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_key_file_readable_by_group_or_others_is_refused(tmp_path, repo_root, mode):
    path = tmp_path / "admin-key"
    path.write_text(KEY)
    os.chmod(path, mode)
    with pytest.raises(SecurityError, match=rf"mode {mode:04o}.*expected 0600") as info:
        load_admin_key({}, key_file=path, repo_root=repo_root)
    assert KEY not in str(info.value)


def test_key_file_inside_the_repository_is_refused_even_to_create(repo_root):
    inside = repo_root / "secrets" / "admin-key"
    with pytest.raises(SecurityError, match="inside the repository"):
        create_admin_key_file(inside, {}, repo_root)
    assert not inside.exists()
    with pytest.raises(SecurityError, match="inside the repository"):
        load_admin_key({}, key_file=inside, repo_root=repo_root)


def test_symlink_into_the_repository_is_refused(tmp_path, repo_root):
    target = repo_root / "admin-key"
    target.write_text(KEY)
    os.chmod(target, 0o600)
    link = tmp_path / "link-to-key"
    link.symlink_to(target)
    with pytest.raises(SecurityError, match="inside the repository"):
        load_admin_key({}, key_file=link, repo_root=repo_root)


@pytest.mark.parametrize("value", ["short", "has space in it and is long enough", "a" * 30 + ":b", "a" * 30 + ",x", "a" * 30 + "=x"])
def test_keys_that_would_break_the_flag_or_are_weak_are_refused_without_echoing_them(value):
    with pytest.raises(SecurityError, match="not acceptable") as info:
        AdminKey(value, "test")
    assert value not in str(info.value)


def test_restricted_flags_lock_the_admin_apis_on_both_protocols():
    flags = restricted_api_flags(AdminKey(KEY, "test"))
    expected = f"model-repository,shared-memory,logging,trace:admin-key={KEY}"
    assert flags == {"http_restricted_api": expected, "grpc_restricted_protocol": expected}
    args = ServerSettings(model_repository="/r", backend_dir="/b", restricted=flags).to_args_list()
    assert f"--http-restricted-api={expected}" in args and f"--grpc-restricted-protocol={expected}" in args


def test_restricting_an_unknown_api_group_is_refused():
    with pytest.raises(SecurityError, match="not allowed"):
        restricted_api_flags(AdminKey(KEY, "test"), apis=("inference",))


def test_grpc_headers_carry_tritons_prefix():
    key = AdminKey(KEY, "test")
    assert key.http_headers() == {"admin-key": KEY}
    assert key.grpc_headers() == {"triton-grpc-protocol-admin-key": KEY}
    assert key.headers("grpc") == key.grpc_headers() and key.headers("http") == key.http_headers()


def test_printed_commands_mask_the_key():
    flags = restricted_api_flags(AdminKey(KEY, "test"))
    args = ServerSettings(model_repository="/r", backend_dir="/b", restricted=flags).to_args_list()
    masked = redact_restricted_flags(args)
    assert not any(KEY in a for a in masked)
    assert "--http-restricted-api=model-repository,shared-memory,logging,trace:admin-key=***" in masked
    assert len(masked) == len(args)


def test_one_off_keys_are_valid_and_differ():
    assert one_off_admin_key().value != one_off_admin_key().value


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_permission(host):
    assert check_bind_host(host, allow_non_loopback=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.org"])
def test_other_addresses_are_refused_unless_explicitly_allowed_then_logged(host):
    with pytest.raises(SecurityError, match="--allow-non-loopback"):
        check_bind_host(host, allow_non_loopback=False)
    assert "WARNING" in check_bind_host(host, allow_non_loopback=True)


def test_server_settings_bind_to_loopback_by_default():
    args = ServerSettings(model_repository="/r", backend_dir="/b").to_args_list()
    for flag in ("--http-address", "--grpc-address", "--metrics-address"):
        assert f"{flag}=127.0.0.1" in args


# --- paths from configuration -------------------------------------------------------------------

@pytest.mark.parametrize("value", ["../secrets", "/etc/passwd", "~/x", "a/../../b", "a//b", "./a", "a\\b", "", "a\x00b", 7])
def test_path_options_that_could_leave_the_model_directory_are_rejected(value):
    from contracts.serving_spec import ModelSpec

    with pytest.raises(ConfigError, match=r"`models.m.options.vocab_file` = .* is not a safe relative path"):
        ModelSpec(name="m", recipe="digit_cnn", options={"vocab_file": value})


def test_plain_relative_path_options_and_non_path_options_are_accepted():
    from contracts.serving_spec import ModelSpec

    spec = ModelSpec(name="m", recipe="digit_cnn", options={"vocab_file": "tokenizer/vocab.txt", "width": 16, "note": "../fine"})
    assert spec.options["vocab_file"] == "tokenizer/vocab.txt"


@pytest.mark.parametrize("name", ["../other/1/model.onnx", "/etc/passwd", "a/../../x.onnx", "", "sub\\x.onnx"])
def test_backend_refuses_a_model_file_outside_its_version_directory(tmp_path, name):
    from serving.backend.checks import model_file_in_version_dir

    with pytest.raises(ValueError, match="not a plain relative path"):
        model_file_in_version_dir(str(tmp_path), name)


def test_backend_refuses_a_symlinked_model_file_that_leaves_the_version_directory(tmp_path):
    from serving.backend.checks import model_file_in_version_dir

    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").symlink_to(tmp_path / "elsewhere.onnx")
    with pytest.raises(ValueError, match="outside"):
        model_file_in_version_dir(str(version), "model.onnx")
    assert model_file_in_version_dir(str(version), "sub/model.onnx") == str((version / "sub" / "model.onnx").resolve())


def test_launcher_rereads_the_key_file_so_a_restart_picks_up_a_rotated_key(tmp_path):
    from serving.runtime import security

    path = tmp_path / "admin-key"
    create_admin_key_file(path, {}, tmp_path / "repo")
    first = security.launcher_admin_key({}, path)
    path.unlink()
    create_admin_key_file(path, {}, tmp_path / "repo")
    second = security.launcher_admin_key({}, path)
    assert first.value != second.value and second.source == f"file {path.resolve()}"


def test_a_partition_restarted_while_the_key_file_is_gone_keeps_the_key_loaded_at_start(tmp_path, monkeypatch, caplog):
    """It got a one-off key in silence: its admin APIs refused the key every other partition took,
    403 (a review, 2026-12-06: a rotation's `rm` before `make admin-key`, and a crash in between)."""
    import logging

    from serving.runtime import security

    monkeypatch.setattr(security, "_configured_key", None)
    path = tmp_path / "admin-key"
    create_admin_key_file(path, {}, tmp_path / "repo")
    first = security.launcher_admin_key({}, path)
    path.unlink()
    caplog.set_level(logging.WARNING, logger="serving.runtime.supervisor")
    assert security.launcher_admin_key({}, path) is first
    assert "the admin key (file" in caplog.text and "is gone: this server keeps the key loaded at start" in caplog.text
    assert first.value not in caplog.text


def test_without_a_configured_key_the_launcher_uses_one_one_off_key_per_process(tmp_path, monkeypatch):
    from serving.runtime import security

    monkeypatch.setattr(security, "_one_off_key", None)
    monkeypatch.setattr(security, "_configured_key", None)
    a = security.launcher_admin_key({}, tmp_path / "absent")
    assert a is security.launcher_admin_key({}, tmp_path / "absent")
    assert "one-off" in a.source


# --- how the launcher starts servers ---------------------------------------------------------------

def test_every_partition_server_is_started_with_the_admin_apis_locked(monkeypatch):
    from serving.runtime import security
    from serving.runtime.launcher import partition_server_settings
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import serving_spec_from_dict

    monkeypatch.setenv(ADMIN_KEY_ENV, KEY)
    spec = serving_spec_from_dict({
        "models": {"a": {"recipe": "digit_cnn", "partition": "p"}, "b": {"recipe": "digit_cnn", "partition": "q"}},
        "partitions": {"p": {"compute_share": 50, "memory_mb": 256}, "q": {"compute_share": 50, "memory_mb": 256}},
        "priorities": {}, "batching": {},
    })
    plan = plan_partitions(spec, 2, False, [0, 1])
    for part in plan.partitions:
        settings = partition_server_settings(plan, part, "/repo", "/backends")
        assert settings.restricted == security.restricted_api_flags(AdminKey(KEY, "test"))
        assert settings.host == "127.0.0.1"


def test_one_broken_model_does_not_stop_the_server_or_its_readiness():
    args = ServerSettings(model_repository="/r", backend_dir="/b").to_args_list()
    assert "--exit-on-error=false" in args and "--strict-readiness=false" in args


def test_server_processes_get_a_stack_limit_large_enough_for_big_http_bodies():
    import subprocess
    import sys

    from serving.runtime.server import SERVER_STACK_LIMIT_BYTES, raise_stack_limit

    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_STACK)[0])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30,
                         preexec_fn=lambda: raise_stack_limit(SERVER_STACK_LIMIT_BYTES))
    import resource

    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    expected = SERVER_STACK_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(SERVER_STACK_LIMIT_BYTES, hard)
    assert int(out.stdout) == expected


def test_the_servers_environment_does_not_carry_the_admin_key_to_backend_stubs():
    """Every stub (so every model's Python code) inherits the server's environment; the server takes
    the key from its flags and needs no copy of it there."""
    from serving.runtime.server import TritonInstallation, server_environment

    installation = TritonInstallation(binary=Path("/opt/tritonserver/bin/tritonserver"),
                                      backends_dir=Path("/opt/tritonserver/backends"), bundled=False)
    env = server_environment(installation, {"TRITON_ADMIN_KEY": "k" * 32, "HOME": "/home/x"})
    assert "TRITON_ADMIN_KEY" not in env and env["HOME"] == "/home/x"


def test_the_key_leaves_the_command_line_for_a_decoy_and_the_environment_carries_it_back():
    from serving.runtime.security import ARGV_DECOY_ENV, ARGV_SECRET_ENV, keep_key_off_command_line

    flags = restricted_api_flags(AdminKey(KEY, "test"))
    command = ["tritonserver", "--http-port=8000", *(f"--{k.replace('_', '-')}={v}" for k, v in sorted(flags.items()))]
    hidden_command, env = keep_key_off_command_line(command, flags)
    assert not [arg for arg in hidden_command if KEY in arg] and env[ARGV_SECRET_ENV] == KEY
    assert [arg.replace(env[ARGV_DECOY_ENV], KEY) for arg in hidden_command] == command
    assert keep_key_off_command_line(command, {}) == (command, {})


def test_a_key_file_named_in_the_environment_that_does_not_exist_is_an_error_naming_it(tmp_path):
    repo_root = tmp_path / "repo"
    repo_root.mkdir()
    typo = tmp_path / "keys" / "admin-kye"
    with pytest.raises(SecurityError, match=rf"admin key file {typo} \(TRITON_ADMIN_KEY_FILE\) does not exist; expected "
                                            r"the key file to use: create it with `make admin-key`"):
        load_admin_key({ADMIN_KEY_FILE_ENV: str(typo)}, repo_root=repo_root)


def test_a_key_file_named_in_the_environment_and_gone_after_start_still_keeps_the_key_loaded_at_start(tmp_path, monkeypatch):
    """The refusal of a missing TRITON_ADMIN_KEY_FILE is for a start; a restart mid-rotation keeps
    the key this process loaded (the test above, with the file named in the environment)."""
    from serving.runtime import security

    monkeypatch.setattr(security, "_configured_key", None)
    path = tmp_path / "admin-key"
    environ = {ADMIN_KEY_FILE_ENV: str(path)}
    create_admin_key_file(None, environ, tmp_path / "repo")
    first = security.launcher_admin_key(environ)
    path.unlink()
    assert security.launcher_admin_key(environ) is first
