"""Where a state lives, from what the user wrote: a path, ``file://`` or ``kubernetes://NS/NAME``; any other
URL is an error (never a file of that name), and so is a kubernetes URL whose names make no valid objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.errors import StateError
from gpuplan.state.location import KubernetesLocation, describe, parse_location


def test_paths_and_file_urls_are_files() -> None:
    assert parse_location("gpuplan.state.json") == Path("gpuplan.state.json")
    assert parse_location("team/state.json") == Path("team/state.json")
    assert parse_location("file:///srv/gpuplan/state.json") == Path("/srv/gpuplan/state.json")


def test_a_kubernetes_url_names_the_secret_its_parts_and_the_lease() -> None:
    location = parse_location("kubernetes://gpu-operator/team-a", lease_seconds=5)
    assert location == KubernetesLocation("gpu-operator", "team-a", 5)
    assert isinstance(location, KubernetesLocation)
    assert (location.secret_name, location.part_name(2), location.lease_name) == (
        "gpuplan-state-team-a",
        "gpuplan-state-team-a-part-2",
        "gpuplan-lock-team-a",
    )
    assert describe(location) == "kubernetes://gpu-operator/team-a"


def test_a_url_a_click_path_collapsed_reads_as_the_url() -> None:
    """``click.Path`` makes ``kubernetes://ns/x`` into ``kubernetes:/ns/x``; it is still the URL."""
    assert parse_location(str(Path("kubernetes://gpu-operator/x"))) == KubernetesLocation("gpu-operator", "x")
    with pytest.raises(StateError, match="s3://"):
        parse_location(str(Path("s3://bucket/x")))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("s3://bucket/state.json", "does not understand the state URL scheme s3://"),
        ("https://example.com/state", "scheme https://"),
        ("kubernetes://only-one-part", "names a namespace and a state name"),
        ("kubernetes://ns/a/b", "names a namespace and a state name"),
        ("kubernetes:///x", "names a namespace and a state name"),
        ("kubernetes://Team/x", "'Team' is not a namespace name"),
        ("kubernetes://ns/Team_A", "'Team_A' is not a state name"),
        ("kubernetes://ns/" + "x" * 41, "at most 40"),
        ("kubernetes://ns/team-part-1", "may not end in -part-<number>"),
        ("", "the state location is empty"),
    ],
)
def test_what_gpuplan_does_not_understand_is_an_error(text: str, words: str) -> None:
    with pytest.raises(StateError) as error:
        parse_location(text)
    assert words in error.value.summary
    assert error.value.hint


def test_a_lease_shorter_than_a_second_is_refused() -> None:
    with pytest.raises(StateError, match="leaseDurationSeconds must be at least 1"):
        parse_location("kubernetes://ns/x", lease_seconds=0)
