"""Credentials: what a process needs to connect as one identity, and how processes find theirs."""

import argparse
import stat

import pytest

from computeall.protocol.bus import add_bus_arguments, credential_from_args
from computeall.protocol.credentials import Credential, CredentialError, new_nkey_seed, nkey_public


def test_a_seed_and_its_public_key():
    seed = new_nkey_seed()
    assert seed.startswith("SU") and nkey_public(seed).startswith("U")
    assert nkey_public(seed) == nkey_public(seed) != nkey_public(new_nkey_seed())


def test_a_saved_credential_is_the_owners_alone_and_loads_back(tmp_path):
    credential = Credential(role="pnode", name="p1", servers=["nats://h:4222"], nkey_seed=new_nkey_seed())
    path = credential.save(tmp_path / "c.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Credential.load(path) == credential


def test_the_inbox_prefix_is_the_identitys_own():
    assert Credential(role="user", name="alice").inbox_prefix == "_INBOX.user.alice"
    options = Credential(role="user", name="alice", servers=["nats://h:1"], nkey_seed=new_nkey_seed()).nats_options()
    assert options["inbox_prefix"] == "_INBOX.user.alice" and options["nkeys_seed_str"].startswith("SU")


def test_a_name_is_one_subject_token():
    with pytest.raises(ValueError):
        Credential(role="user", name="alice.smith")  # `ca.cmd.alice.>` would cover it


def test_processes_find_their_credential(tmp_path):
    parser = argparse.ArgumentParser()
    add_bus_arguments(parser)
    path = Credential(role="dataset", name="dataset", servers=["nats://a:1"]).save(tmp_path / "d.json")
    found = credential_from_args(parser.parse_args(["--credential", str(path), "--nats", "nats://b:2"]), "dataset", "dataset")
    assert found.servers == ["nats://b:2"] and found.role == "dataset"
    with pytest.raises(CredentialError, match="is a dataset credential; this process needs a monitor one"):
        credential_from_args(parser.parse_args(["--credential", str(path)]), "monitor", "monitor")
    anonymous = credential_from_args(parser.parse_args(["--nats", "nats://c:3"]), "monitor", "monitor")
    assert anonymous.nkey_seed is None and anonymous.servers == ["nats://c:3"]


def test_an_unreadable_credential_says_which_file(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CredentialError, match="bad.json is not a computeall credential"):
        Credential.load(tmp_path / "bad.json")
    with pytest.raises(CredentialError, match="cannot read the credential"):
        Credential.load(tmp_path / "missing.json")
