"""Checks of docker/Dockerfile and docker/compose.yaml that need no container engine (none
runs where these tests run): the image's healthcheck script is run for real, against a
stand-in `enlarger` that records how it was called; the rest is read from the files.
hadolint and the Compose Specification's schema (scripts/test-deploy) cover the syntax.

Run: python -m unittest deploy/tests/test_docker.py (needs PyYAML).
"""

import json
import os
import pathlib
import re
import subprocess
import tempfile
import unittest

import yaml

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent.parent
DOCKERFILE = REPOSITORY / "docker" / "Dockerfile"
COMPOSE = REPOSITORY / "docker" / "compose.yaml"
KUBERNETES = REPOSITORY / "deploy" / "kubernetes"


def instructions():
    """The Dockerfile's instructions as (keyword, rest), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def healthcheck_command():
    (rest,) = [rest for keyword, rest in instructions() if keyword == "HEALTHCHECK"]
    return json.loads(rest[rest.index("CMD ") + 4:])


class DockerfileTests(unittest.TestCase):
    def run_healthcheck(self, environment, status=0):
        """Runs the HEALTHCHECK command with a stand-in `enlarger` first on PATH; returns its
        exit status and the stand-in's arguments (None if it was not called)."""
        with tempfile.TemporaryDirectory() as directory:
            calls = pathlib.Path(directory) / "calls"
            stub = pathlib.Path(directory) / "enlarger"
            stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" > "{calls}"\nexit {status}\n')
            stub.chmod(0o755)
            env = {"PATH": f"{directory}:/usr/bin:/bin", **environment}
            result = subprocess.run(healthcheck_command(), env=env, timeout=10)
            return result.returncode, calls.read_text().strip() if calls.exists() else None

    def test_the_healthcheck_asks_the_metrics_server_the_process_runs(self):
        self.assertEqual(self.run_healthcheck({"ENLARGER_METRICS": "0.0.0.0:9570"}),
                         (0, "health --live --http 127.0.0.1:9570"))
        self.assertEqual(self.run_healthcheck({"ENLARGER_METRICS": "[::]:9571"}),
                         (0, "health --live --http 127.0.0.1:9571"))

    def test_the_healthcheck_fails_when_enlarger_health_does(self):
        self.assertEqual(self.run_healthcheck({"ENLARGER_METRICS": "0.0.0.0:9570"}, status=1)[0], 1)

    def test_a_container_without_a_metrics_server_has_nothing_to_check(self):
        self.assertEqual(self.run_healthcheck({}), (0, None))
        self.assertEqual(self.run_healthcheck({"ENLARGER_METRICS": ""}), (0, None))

    def test_the_ports_are_exposed(self):
        exposed = {port for keyword, rest in instructions() if keyword == "EXPOSE" for port in rest.split()}
        self.assertEqual(exposed, {"5570", "5571", "9570"})

    def test_the_image_runs_as_the_numeric_user_the_pods_expect(self):
        users = [rest for keyword, rest in instructions() if keyword == "USER"]
        uid = users[-1].split(":")[0]
        self.assertTrue(uid.isdigit() and int(uid) != 0, users[-1])
        for path in KUBERNETES.glob("*.yaml"):
            for document in yaml.safe_load_all(path.read_text()):
                if document and document.get("kind") == "Deployment":
                    context = document["spec"]["template"]["spec"]["securityContext"]
                    self.assertEqual(context["runAsUser"], int(uid), path.name)

    def test_base_images_and_packages_are_pinned(self):
        for keyword, rest in instructions():
            if keyword == "FROM":
                image = rest.split()[0]
                self.assertRegex(image, r":[^:]*[0-9]", f"{image} has no version in its tag")
            if keyword == "RUN" and "apt-get install" in rest:
                words = rest.split("apt-get install", 1)[1].split("&&")[0].split()
                packages = [w for w in words if not w.startswith("-")]
                self.assertTrue(packages)
                for package in packages:
                    self.assertIn("=", package, f"{package} is not pinned")

    def test_the_runtime_image_can_verify_https_sources(self):
        froms = [index for index, (keyword, _) in enumerate(instructions()) if keyword == "FROM"]
        runtime = " ".join(rest for keyword, rest in instructions()[froms[-1]:] if keyword == "RUN")
        self.assertRegex(runtime, r"apt-get install [^&]*\bca-certificates=")

    def test_the_comment_on_pins_is_true(self):
        # Package.resolved is not committed (the project's rule), so the image can follow one
        # only when the build context has it; the comment must not claim more.
        text = DOCKERFILE.read_text()
        self.assertIn("COPY Package.swift Package.resolved* ./", text)
        self.assertIn("What is not pinned: the Swift packages", text)
        self.assertIn("Package.resolved", (REPOSITORY / ".gitignore").read_text().split())

    def test_the_binary_is_stripped(self):
        build = " ".join(rest for keyword, rest in instructions() if keyword == "RUN")
        self.assertTrue("strip " in build or "-Xlinker -s" in build)


class ComposeTests(unittest.TestCase):
    compose = yaml.safe_load(COMPOSE.read_text())

    def test_broker_and_workers_are_health_checked_on_their_metrics_port(self):
        for name in ("broker", "worker"):
            service = self.compose["services"][name]
            metrics = service["environment"]["ENLARGER_METRICS"]
            test = service["healthcheck"]["test"]
            self.assertEqual(test[:5], ["CMD", "enlarger", "health", "--http", "127.0.0.1:" + metrics.rsplit(":", 1)[1]])
            self.assertIn(service["restart"], ("always", "unless-stopped", "on-failure"))

    def test_the_producer_writes_as_the_key_owner_with_the_callers_group(self):
        # uid 10001 owns the producer's key in the volume (mode 0600); the group comes from
        # ENLARGER_GID so that a host directory of that group can take the thumbnails.
        producer = self.compose["services"]["producer"]
        self.assertEqual(producer["user"], "10001:${ENLARGER_GID:-10001}")
        self.assertIn("ENLARGER_GID=$(id -g)", COMPOSE.read_text())

    def test_nothing_unauthenticated_is_published(self):
        for name, service in self.compose["services"].items():
            for port in service.get("ports", []):
                self.assertTrue(str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback")
                self.assertNotIn(str(port).rsplit(":", 1)[1], ("5571", "9570"), f"{name} publishes {port}")
            self.assertNotIn("ENLARGER_INSECURE_TCP", service.get("environment", {}))


if __name__ == "__main__":
    unittest.main()
