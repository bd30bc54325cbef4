"""deploy/container/Containerfile, without a container runtime: every
instruction is known, the stages are a CUDA devel build and a CUDA runtime
image, every COPY source exists (in the repository for the build stage, in
an earlier stage for --from), the paths the build stage's RUN steps read
from the copied tree exist, the CMake targets it builds exist, and the
HEALTHCHECK is `giftctl health`."""

import json
import os
import pathlib
import re
import shlex

from deploy_testutil import CONTAINER_DIR, ROOT

CONTAINERFILE = CONTAINER_DIR / "Containerfile"
KNOWN = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
         "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
         "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def instructions():
    """[(INSTRUCTION, arguments)] with continuations joined, comments and
    blank lines dropped."""
    out, pending = [], ""
    for line in CONTAINERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word, rest.strip()))
    assert not pending, "the file ends inside a continued line"
    return out


def stages():
    """[(name, base image, [(instruction, args)])]"""
    result = []
    for word, rest in instructions():
        if word == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, rest
            result.append((m.group(2), m.group(1), []))
        elif result:
            result[-1][2].append((word, rest))
    return result


def test_every_instruction_is_known_and_from_comes_first():
    ins = instructions()
    for word, _ in ins:
        assert word in KNOWN, f"unknown instruction {word}"
    first_non_arg = next(w for w, _ in ins if w != "ARG")
    assert first_non_arg == "FROM"


def test_stages_build_on_cuda_13_ubuntu_images():
    args = dict(re.fullmatch(r"(\w+)=(\S+)", rest).groups()
                for word, rest in instructions()[:2] if word == "ARG")
    assert args["CUDA_VERSION"].startswith("13.0.")
    s = stages()
    assert [name for name, _, _ in s] == ["build", "runtime"]
    bases = [base.replace("${CUDA_VERSION}", args["CUDA_VERSION"])
                 .replace("${UBUNTU}", args["UBUNTU"]) for _, base, _ in s]
    assert re.fullmatch(r"docker\.io/nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04",
                        bases[0]), bases[0]
    assert re.fullmatch(
        r"docker\.io/nvidia/cuda:13\.0\.\d+-runtime-ubuntu24\.04",
        bases[1]), bases[1]


def copy_parts(rest):
    parts = shlex.split(rest)
    flags = [p for p in parts if p.startswith("--")]
    paths = [p for p in parts if not p.startswith("--")]
    assert len(paths) >= 2, rest
    return flags, paths[:-1], paths[-1]


def test_copy_sources_exist():
    s = stages()
    produced = {}  # stage -> text of its RUN steps
    for name, _, body in s:
        for word, rest in body:
            if word not in ("COPY", "ADD"):
                continue
            flags, sources, _ = copy_parts(rest)
            src_stage = [f.split("=", 1)[1] for f in flags
                         if f.startswith("--from=")]
            if not src_stage:
                for src in sources:
                    assert (ROOT / src).exists(), f"COPY {src}: not in repo"
                continue
            assert src_stage[0] in produced, f"--from={src_stage[0]} unknown"
            for src in sources:
                # The earlier stage creates it (an install / cp target).
                assert src.rstrip("/") in produced[src_stage[0]], (
                    f"COPY --from={src_stage[0]} {src}: not produced there")
        produced[name] = " ".join(r for w, r in body if w == "RUN")


def cmake_files():
    """CMakeLists.txt and *.cmake of the sources (not the build trees)."""
    for top in ROOT.iterdir():
        if top.name.startswith(("build", ".")) or not top.is_dir():
            continue
        for dirpath, _, files in os.walk(top):
            for f in files:
                if f == "CMakeLists.txt" or f.endswith(".cmake"):
                    yield pathlib.Path(dirpath) / f
    yield ROOT / "CMakeLists.txt"


def test_build_stage_reads_only_copied_paths_and_real_targets():
    _, _, body = stages()[0]
    copied = set()
    for word, rest in body:
        if word == "COPY":
            _, sources, _ = copy_parts(rest)
            copied.update(src.rstrip("/") for src in sources)
    runs = " ".join(r for w, r in body if w == "RUN")
    for path in re.findall(r"/src/([\w./-]+)", runs):
        assert (ROOT / path).exists(), f"/src/{path}: not in the repository"
        assert path.split("/")[0] in copied, f"/src/{path}: not copied"
    commands = [c.strip() for w, r in body if w == "RUN"
                for c in r.split("&&")]
    builds = [c for c in commands if c.startswith("cmake --build")]
    assert len(builds) == 1, builds
    targets = shlex.split(builds[0].split("--target", 1)[1])
    assert {"giftd", "giftctl"} <= set(targets)
    cmake_text = " ".join(p.read_text() for p in cmake_files())
    for t in targets:
        assert re.search(rf"add_(executable|custom_target|library)\({t}\b",
                         cmake_text), f"cmake target {t} not defined"


def test_runtime_stage_healthcheck_entrypoint_and_user():
    _, _, body = stages()[-1]
    words = dict(body)
    health = words["HEALTHCHECK"]
    m = re.search(r"CMD (\[.*\])", health)
    assert m, health
    cmd = json.loads(m.group(1))
    assert cmd[0] == "/opt/gift/bin/giftctl" and cmd[-1] == "health"
    assert json.loads(words["ENTRYPOINT"]) == ["/opt/gift/bin/giftd"]
    assert "--config" in json.loads(words["CMD"])
    assert words["USER"] != "root" and not words["USER"].startswith("0")
    assert "GIFT_AGENT_SOCKET=/run/gift/agent.sock" in words["ENV"]


def test_ignore_file_keeps_build_trees_out_of_the_context():
    ignored = (CONTAINER_DIR / "Containerfile.dockerignore").read_text()
    assert re.search(r"^build$", ignored, re.M)
    assert re.search(r"^build-\*$", ignored, re.M)
