"""Semantic checks of deploy/kubernetes: what a schema cannot see.

Each check is a function from the manifests (and the README) to a list of problems. The
tests run every check on the real files, expecting none, and each check again on a copy
with one thing broken, expecting it to notice: a check that cannot fail checks nothing.

Run: python -m unittest deploy/tests/test_manifests.py (needs PyYAML).
"""

import copy
import os
import pathlib
import re
import shlex
import unittest

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent / "kubernetes"

# The broker's ports, by the names its container gives them.
CLIENT_PORT, WORKER_PORT, METRICS_PORT = "clients", "workers", "metrics"
# Variables naming key files and directories (the flags --server-key, --key, ...).
SECRET_KEY_FILES = ("ENLARGER_SERVER_KEY", "ENLARGER_KEY")
ALLOW_LIST_DIRECTORIES = ("ENLARGER_CLIENT_KEYS", "ENLARGER_WORKER_KEYS", "ENLARGER_ADMIN_KEYS")
PUBLIC_KEY_FILES = ("ENLARGER_SERVER_PUBLIC_KEY",)
# The annotation that must explain a client port exposed beyond the cluster.
EXPOSURE_NOTE = "exposure-note"
# The worker's default memory budget, a share of its memory limit (MemoryBudget.defaultFraction).
DEFAULT_BUDGET_FRACTION = 0.75


class Manifests:
    """Every resource under deploy/kubernetes (the alternatives included), and the README."""

    def __init__(self, root=ROOT):
        self.root = root
        self.files = {}
        for path in sorted(root.rglob("*.yaml")):
            with path.open() as stream:
                self.files[str(path.relative_to(root))] = [d for d in yaml.safe_load_all(stream) if d]
        self.readme = (root / "README.md").read_text()

    def resources(self):
        return [d for name, docs in self.files.items() if name != "kustomization.yaml" for d in docs]

    def kind(self, kind):
        return [d for d in self.resources() if d.get("kind") == kind]

    def deployment(self, component):
        for d in self.kind("Deployment"):
            if pod_labels(d).get("app.kubernetes.io/component") == component:
                return d
        raise LookupError(f"no Deployment for the {component}")

    def copy(self):
        other = copy.copy(self)
        other.files = copy.deepcopy(self.files)
        return other


# MARK: - Reading manifests


def pod_labels(deployment):
    return deployment["spec"]["template"]["metadata"].get("labels", {})


def pod_spec(deployment):
    return deployment["spec"]["template"]["spec"]


def all_containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


def environment(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def named_port(container, name):
    for port in container.get("ports", []):
        if port.get("name") == name:
            return port["containerPort"]
    return None


def container_port(deployment, target):
    """The port number a Service's targetPort reaches in the deployment's pods, or None."""
    for container in pod_spec(deployment)["containers"]:
        if isinstance(target, str):
            number = named_port(container, target)
            if number is not None:
                return number
        elif any(p["containerPort"] == target for p in container.get("ports", [])):
            return target
    return None


def volume(spec, name):
    return next((v for v in spec.get("volumes", []) if v["name"] == name), None)


def mount_for(container, path):
    """The volume mount that holds `path` in the container: the longest mountPath above it."""
    best = None
    for m in container.get("volumeMounts", []):
        mount = m["mountPath"].rstrip("/")
        if path == mount or path.startswith(mount + "/"):
            if best is None or len(mount) > len(best["mountPath"].rstrip("/")):
                best = m
    return best


QUANTITY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
                     "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3}


def quantity(text):
    """A Kubernetes resource quantity ("1Gi", "500M", "250m", "2") as a number."""
    match = re.fullmatch(r"([0-9.]+(?:[eE][-+]?[0-9]+)?)([A-Za-z]*)", str(text).strip())
    if not match or match.group(2) not in QUANTITY_SUFFIXES and match.group(2):
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * QUANTITY_SUFFIXES.get(match.group(2), 1)


def enlarger_bytes(text):
    """A byte count as `--memory-budget` reads it: K, M, G, T are binary multiples."""
    digits = str(text).strip().upper()
    for suffix in ("IB", "B"):
        if digits.endswith(suffix):
            digits = digits[: -len(suffix)]
            break
    multiplier = 1
    if digits and digits[-1] in "KMGT":
        multiplier = 1024 ** ("KMGT".index(digits[-1]) + 1)
        digits = digits[:-1]
    if not re.fullmatch(r"[0-9.]+", digits):
        raise ValueError(f"not a byte count: {text!r}")
    return int(float(digits) * multiplier)


def readme_secrets(readme):
    """{secret name: [--from-file arguments]} from the README's `kubectl create secret` lines."""
    text = readme.replace("\\\n", " ")
    secrets = {}
    for line in text.splitlines():
        if "create secret generic" not in line:
            continue
        words = shlex.split(line.split("#")[0])
        name = words[words.index("generic") + 1]
        sources = [w.split("=", 1)[1] for w in words if w.startswith("--from-file=")]
        secrets.setdefault(name, []).extend(sources)
    return secrets


def provides(source, key):
    """Whether a --from-file argument makes a Secret key named `key`."""
    if source.endswith("/"):
        return key.endswith(".pub")  # a directory of public keys: any NAME.pub
    if "=" in source:
        return source.split("=", 1)[0] == key
    return os.path.basename(source) == key


# MARK: - Checks


def check_kustomization(m):
    problems = []
    kustomization = m.files["kustomization.yaml"][0]
    listed = set(kustomization.get("resources", []))
    top_level = {name for name in m.files if "/" not in name and name != "kustomization.yaml"}
    for name in sorted(top_level - listed):
        problems.append(f"{name} is not in kustomization.yaml")
    for name in sorted(listed - set(m.files)):
        problems.append(f"kustomization.yaml lists {name}, which does not exist")
    images = {i["name"] for i in kustomization.get("images", [])}
    for d in m.kind("Deployment"):
        for c in all_containers(pod_spec(d)):
            if c["image"].split(":")[0] not in images:
                problems.append(f"{d['metadata']['name']}/{c['name']}: image {c['image']} not set by kustomization.yaml")
    return problems


def check_probes(m):
    """Probes ask the container's named metrics port, the one its ENLARGER_METRICS serves."""
    problems = []
    for d in m.kind("Deployment"):
        for c in pod_spec(d)["containers"]:
            where = f"{d['metadata']['name']}/{c['name']}"
            metrics = environment(c).get("ENLARGER_METRICS")
            if not metrics:
                problems.append(f"{where}: no ENLARGER_METRICS, so nothing answers its probes")
                continue
            served = int(metrics.rsplit(":", 1)[1])
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                get = c.get(probe, {}).get("httpGet")
                if not get:
                    problems.append(f"{where}: no HTTP {probe}")
                    continue
                if get.get("path") != path:
                    problems.append(f"{where}: {probe} asks {get.get('path')}, not {path}")
                port = get.get("port")
                if not isinstance(port, str):
                    problems.append(f"{where}: {probe} uses port {port!r}, not a named port")
                elif named_port(c, port) is None:
                    problems.append(f"{where}: {probe} names port {port!r}, which the container lacks")
                elif named_port(c, port) != served:
                    problems.append(f"{where}: {probe} port {port} is {named_port(c, port)}, "
                                    f"but ENLARGER_METRICS serves {served}")
    return problems


def check_worker_memory(m):
    """The worker's memory limit exceeds its job memory budget, and is also its request."""
    worker = m.deployment("worker")
    c = pod_spec(worker)["containers"][0]
    resources = c.get("resources", {})
    if "memory" not in resources.get("limits", {}):
        return ["the worker has no memory limit: its budget would be a share of the node's RAM"]
    limit = quantity(resources["limits"]["memory"])
    budget_text = environment(c).get("ENLARGER_MEMORY_BUDGET")
    budget = enlarger_bytes(budget_text) if budget_text else DEFAULT_BUDGET_FRACTION * limit
    problems = []
    if budget >= limit:
        problems.append(f"the worker's memory budget {budget_text} is not below its limit {resources['limits']['memory']}")
    if quantity(resources.get("requests", {}).get("memory", 0)) != limit:
        problems.append("the worker's memory request differs from its limit")
    return problems


def check_concurrency(m):
    """One number three times: the worker's job threads, its CPU request, the autoscaler's target."""
    c = pod_spec(m.deployment("worker"))["containers"][0]
    concurrency = environment(c).get("ENLARGER_CONCURRENCY")
    if concurrency is None:
        return ["the worker sets no ENLARGER_CONCURRENCY: it would run one thread per core of the node"]
    problems = []
    cpu = c.get("resources", {}).get("requests", {}).get("cpu")
    if cpu is None or quantity(cpu) != int(concurrency):
        problems.append(f"the worker's CPU request {cpu} is not its concurrency {concurrency}")
    for so in m.kind("ScaledObject"):
        for trigger in so["spec"]["triggers"]:
            if float(trigger["metadata"].get("threshold", "nan")) != int(concurrency):
                problems.append(f"{so['metadata']['name']}: threshold is not the worker's concurrency {concurrency}")
    for hpa in m.kind("HorizontalPodAutoscaler"):
        for metric in hpa["spec"].get("metrics", []):
            target = metric.get(metric["type"][0].lower() + metric["type"][1:], {}).get("target", {})
            if quantity(target.get("averageValue", "nan")) != int(concurrency):
                problems.append(f"{hpa['metadata']['name']}: averageValue is not the worker's concurrency {concurrency}")
    return problems


def referenced_secrets(m):
    """{secret name: [(deployment, volume or None)]} for every Secret a pod uses."""
    found = {}
    for d in m.kind("Deployment"):
        spec = pod_spec(d)
        for v in spec.get("volumes", []):
            if "secret" in v:
                found.setdefault(v["secret"]["secretName"], []).append((d, v))
            for source in v.get("projected", {}).get("sources", []):
                if "secret" in source:
                    found.setdefault(source["secret"]["name"], []).append((d, None))
        for c in all_containers(spec):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    found.setdefault(ref["name"], []).append((d, None))
            for e in c.get("envFrom", []):
                if "secretRef" in e:
                    found.setdefault(e["secretRef"]["name"], []).append((d, None))
    return found


def check_secrets_documented(m):
    """Every Secret a pod uses is created in the README, with the keys the pod reads."""
    documented = readme_secrets(m.readme)
    used = referenced_secrets(m)
    problems = []
    for name, uses in sorted(used.items()):
        if name not in documented:
            problems.append(f"Secret {name} is used but the README never creates it")
            continue
        for d, v in uses:
            items = (v or {}).get("secret", {}).get("items")
            if items:
                for item in items:
                    if not any(provides(s, item["key"]) for s in documented[name]):
                        problems.append(f"{d['metadata']['name']} reads key {item['key']} of {name}, "
                                        "which the README does not put in it")
            elif v is not None and not any(s.endswith("/") for s in documented[name]):
                problems.append(f"{name} is mounted as a directory of keys, but the README fills it file by file")
    for name in sorted(set(documented) - set(used)):
        problems.append(f"the README creates Secret {name}, which no manifest uses")
    return problems


def check_secret_volumes(m):
    """Secret volumes: mounted read-only, files readable by owner and group at most."""
    problems = []
    for d in m.kind("Deployment"):
        spec = pod_spec(d)
        secret_volumes = {v["name"]: v for v in spec.get("volumes", []) if "secret" in v}
        for name, v in secret_volumes.items():
            modes = [v["secret"].get("defaultMode")] + [i.get("mode") for i in v["secret"].get("items", []) if "mode" in i]
            if modes[0] is None:
                problems.append(f"{d['metadata']['name']}: Secret volume {name} has no defaultMode (0644 by default)")
            for mode in modes:
                if mode is not None and mode & 0o337:
                    problems.append(f"{d['metadata']['name']}: Secret volume {name} mode {mode:o} allows more than reading")
        for c in all_containers(spec):
            for mount in c.get("volumeMounts", []):
                if mount["name"] in secret_volumes and not mount.get("readOnly"):
                    problems.append(f"{d['metadata']['name']}/{c['name']}: Secret {mount['name']} mounted writable")
    return problems


def check_key_paths(m):
    """Each key setting points where a key is: allow-lists at Secret mounts, public keys in a
    Secret, and secret keys in a memory volume that an init container filled, mode 0600 (the
    key's own check refuses the group-readable files of a Secret volume)."""
    problems = []
    for d in m.kind("Deployment"):
        spec = pod_spec(d)
        for c in spec["containers"]:
            where = f"{d['metadata']['name']}/{c['name']}"
            for name, path in environment(c).items():
                if name not in SECRET_KEY_FILES + ALLOW_LIST_DIRECTORIES + PUBLIC_KEY_FILES:
                    continue
                mount = mount_for(c, path)
                v = volume(spec, mount["name"]) if mount else None
                if v is None:
                    problems.append(f"{where}: {name}={path} is on no mounted volume")
                    continue
                if name in ALLOW_LIST_DIRECTORIES:
                    if "secret" not in v or mount["mountPath"].rstrip("/") != path.rstrip("/"):
                        problems.append(f"{where}: {name}={path} is not a Secret volume's mount")
                elif name in PUBLIC_KEY_FILES:
                    items = v.get("secret", {}).get("items")
                    relative = path[len(mount["mountPath"].rstrip("/")) + 1:]
                    if "secret" not in v or (items and relative not in {i["path"] for i in items}):
                        problems.append(f"{where}: {name}={path} is not a file of a Secret volume")
                else:
                    if v.get("emptyDir", {}).get("medium") != "Memory":
                        problems.append(f"{where}: {name}={path} is not on a memory-backed emptyDir")
                    writers = [i for i in spec.get("initContainers", [])
                               if any(x["name"] == v["name"] and x["mountPath"] == mount["mountPath"]
                                      for x in i.get("volumeMounts", []))
                               and path in i.get("command", []) + i.get("args", [])
                               and "0600" in i.get("command", []) + i.get("args", [])]
                    if not writers:
                        problems.append(f"{where}: no init container writes {path} with mode 0600")
    return problems


def check_pod_security(m):
    """Non-root, read-only, no capabilities, no privilege escalation, a seccomp profile, no
    token, no Service variables among the ENLARGER_* settings."""
    problems = []
    for d in m.kind("Deployment"):
        spec = pod_spec(d)
        name = d["metadata"]["name"]
        pod = spec.get("securityContext", {})
        if pod.get("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if not pod.get("runAsUser"):
            problems.append(f"{name}: no non-zero runAsUser")
        if pod.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: no seccomp profile")
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(field):
                problems.append(f"{name}: {field}")
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: mounts a service account token it does not use")
        if spec.get("enableServiceLinks") is not False:
            problems.append(f"{name}: Service variables would share the ENLARGER_ prefix")
        for c in all_containers(spec):
            sc = c.get("securityContext", {})
            where = f"{name}/{c['name']}"
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation is not false")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: the root file system is writable")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []) or sc.get("capabilities", {}).get("add"):
                problems.append(f"{where}: capabilities are not all dropped")
            if sc.get("privileged") or sc.get("runAsUser") == 0 or sc.get("runAsNonRoot") is False:
                problems.append(f"{where}: runs privileged or as root")
    return problems


def check_disruption_budget(m):
    """The PodDisruptionBudgets select the worker pods, and only them."""
    budgets = m.kind("PodDisruptionBudget")
    if not budgets:
        return ["no PodDisruptionBudget for the workers"]
    problems = []
    workers = pod_labels(m.deployment("worker"))
    for pdb in budgets:
        selector = pdb["spec"].get("selector", {}).get("matchLabels", {})
        if not selects(selector, workers):
            problems.append(f"PodDisruptionBudget {pdb['metadata']['name']} does not select the worker pods")
        for d in m.kind("Deployment"):
            if d is not m.deployment("worker") and selects(selector, pod_labels(d)):
                problems.append(f"PodDisruptionBudget {pdb['metadata']['name']} also selects {d['metadata']['name']}")
    return problems


def check_autoscalers(m):
    """Autoscalers drive the worker Deployment, keep at least one worker, and read the queue."""
    worker = m.deployment("worker")
    problems = []
    scalers = m.kind("ScaledObject") + m.kind("HorizontalPodAutoscaler")
    if not scalers:
        problems.append("no autoscaler for the workers")
    for s in scalers:
        name = f"{s['kind']} {s['metadata']['name']}"
        ref = s["spec"]["scaleTargetRef"]
        if (ref.get("kind", "Deployment"), ref["name"], ref.get("apiVersion", "apps/v1")) != (
                "Deployment", worker["metadata"]["name"], "apps/v1"):
            problems.append(f"{name} targets {ref}, not the worker Deployment")
        low = s["spec"].get("minReplicaCount", s["spec"].get("minReplicas", 0))
        high = s["spec"].get("maxReplicaCount", s["spec"].get("maxReplicas", 100))
        if low < 1:
            problems.append(f"{name} may scale to no worker: the broker would never be ready to queue work")
        if high < low:
            problems.append(f"{name}: maximum below minimum")
    for s in m.kind("ScaledObject"):
        for trigger in s["spec"]["triggers"]:
            if trigger["type"] != "prometheus" or "enlarger_queue_depth" not in trigger["metadata"].get("query", ""):
                problems.append(f"ScaledObject {s['metadata']['name']}: a trigger does not read enlarger_queue_depth")
        fallback = s["spec"].get("fallback", {}).get("replicas")
        if fallback is not None and not s["spec"].get("minReplicaCount", 0) <= fallback <= s["spec"].get("maxReplicaCount", 100):
            problems.append(f"ScaledObject {s['metadata']['name']}: fallback outside min..max")
    if scalers and "replicas" in worker["spec"]:
        problems.append("the worker Deployment sets replicas: every apply would undo the autoscaler")
    return problems


def check_service_selectors(m):
    """Each Service selects exactly one Deployment's pods, on ports those pods have."""
    problems = []
    for s in m.kind("Service"):
        name = s["metadata"]["name"]
        matches = [d for d in m.kind("Deployment") if selects(s["spec"].get("selector", {}), pod_labels(d))]
        if len(matches) != 1:
            problems.append(f"Service {name} selects {len(matches)} Deployments' pods")
            continue
        for port in s["spec"]["ports"]:
            if container_port(matches[0], port.get("targetPort", port["port"])) is None:
                problems.append(f"Service {name}: targetPort {port.get('targetPort')} is no port of its pods")
    return problems


def check_worker_service(m):
    """The workers reach the broker through a Service that publishes it before it is ready
    (it becomes ready only once a worker has registered)."""
    broker, worker = m.deployment("broker"), m.deployment("worker")
    endpoint = environment(pod_spec(worker)["containers"][0]).get("ENLARGER_BROKER", "")
    match = re.fullmatch(r"tcp://([^:/]+):([0-9]+)", endpoint)
    if not match:
        return [f"the workers' ENLARGER_BROKER {endpoint!r} is not tcp://SERVICE:PORT"]
    host, number = match.group(1).split(".")[0], int(match.group(2))
    service = next((s for s in m.kind("Service") if s["metadata"]["name"] == host), None)
    if service is None:
        return [f"the workers connect to {host}, which is no Service here"]
    problems = []
    port = next((p for p in service["spec"]["ports"] if p["port"] == number), None)
    broker_workers = named_port(pod_spec(broker)["containers"][0], WORKER_PORT)
    if port is None or container_port(broker, port.get("targetPort", number)) != broker_workers:
        problems.append(f"Service {host} port {number} does not lead to the broker's worker port")
    if not selects(service["spec"].get("selector", {}), pod_labels(broker)):
        problems.append(f"Service {host} does not select the broker")
    ready_gated = broker["spec"]["template"]["spec"]["containers"][0].get("readinessProbe")
    if ready_gated and service["spec"].get("publishNotReadyAddresses") is not True:
        problems.append(f"Service {host} hides a broker that is not ready from the workers it waits for")
    return problems


def check_exposure(m):
    """Only the client port may leave the cluster, and only with a note saying why."""
    broker = m.deployment("broker")
    ports = {name: named_port(pod_spec(broker)["containers"][0], name) for name in (CLIENT_PORT, WORKER_PORT, METRICS_PORT)}
    problems = []
    for s in m.kind("Service"):
        spec = s["spec"]
        exposed = spec.get("type", "ClusterIP") in ("NodePort", "LoadBalancer") or spec.get("externalIPs")
        if not exposed or not selects(spec.get("selector", {}), pod_labels(broker)):
            continue
        reached = {container_port(broker, p.get("targetPort", p["port"])) for p in spec["ports"]}
        name = s["metadata"]["name"]
        for never in (WORKER_PORT, METRICS_PORT):
            if ports[never] in reached:
                problems.append(f"Service {name} exposes the {never} port beyond the cluster")
        if ports[CLIENT_PORT] in reached and not s["metadata"].get("annotations", {}).get(EXPOSURE_NOTE):
            problems.append(f"Service {name} exposes the client port beyond the cluster with no {EXPOSURE_NOTE}")
    return problems


def check_metrics_policy(m):
    """The metrics port of every pod that has one is reached only by the scraper: some
    NetworkPolicy selects the pod for ingress, every rule that admits the metrics port names
    its sources (no rule open to all), and those sources are pods, never an ipBlock beyond a
    single node-sized network. The kubelet's probes come from the node, which Kubernetes
    always admits."""
    problems = []
    policies = [p for p in m.kind("NetworkPolicy") if "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    for component in ("broker", "worker"):
        deployment = m.deployment(component)
        container = pod_spec(deployment)["containers"][0]
        metrics = named_port(container, METRICS_PORT)
        if metrics is None:
            continue
        labels = pod_labels(deployment)
        selecting = [p for p in policies if selects(p["spec"]["podSelector"].get("matchLabels", {}), labels)
                     or p["spec"]["podSelector"] == {}]
        if not selecting:
            problems.append(f"no NetworkPolicy limits ingress to the {component} pods")
            continue
        for policy in selecting:
            for rule in policy["spec"].get("ingress", []):
                ports = rule.get("ports")
                reaches = ports is None or any(p.get("port") in (METRICS_PORT, metrics) or p.get("port") is None
                                               for p in ports)
                if not reaches:
                    continue
                sources = rule.get("from")
                name = policy["metadata"]["name"]
                if not sources:
                    problems.append(f"NetworkPolicy {name} opens the {component}'s metrics port to everyone")
                    continue
                for source in sources:
                    block = source.get("ipBlock")
                    if block is not None:
                        prefix = int(block["cidr"].split("/")[1])
                        if prefix < (32 if ":" not in block["cidr"] else 128):
                            problems.append(f"NetworkPolicy {name} opens the {component}'s metrics port to {block['cidr']}")
                    elif source.get("podSelector") is None or source["podSelector"] == {}:
                        problems.append(f"NetworkPolicy {name} opens the {component}'s metrics port to whole namespaces")
    return problems


def check_broker_is_single(m):
    broker = m.deployment("broker")
    problems = []
    if broker["spec"].get("replicas", 1) != 1:
        problems.append("more than one broker")
    if broker["spec"].get("strategy", {}).get("type") != "Recreate":
        problems.append("the broker's Deployment is not Recreate: a rollout would run two brokers")
    return problems


def check_drain_time(m):
    """A worker gets time to say goodbye: more than the 3 heartbeats after which the broker
    would notice it gone anyway."""
    spec = pod_spec(m.deployment("worker"))
    heartbeat = int(environment(spec["containers"][0]).get("ENLARGER_HEARTBEAT_MS") or 1000)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace * 1000 <= 3 * heartbeat:
        return [f"the workers' grace period {grace}s is shorter than three heartbeats"]
    return []


# MARK: - Tests


class ManifestTests(unittest.TestCase):
    manifests = Manifests()

    def assertHolds(self, check):
        self.assertEqual(check(self.manifests), [])

    def assertCatches(self, check, breakage):
        broken = self.manifests.copy()
        breakage(broken)
        self.assertNotEqual(check(broken), [], f"{check.__name__} missed the breakage")

    def test_kustomization_lists_every_manifest(self):
        self.assertHolds(check_kustomization)
        self.assertCatches(check_kustomization, lambda m: m.files["kustomization.yaml"][0]["resources"].remove("worker-pdb.yaml"))

    def test_probes_ask_the_named_metrics_port(self):
        self.assertHolds(check_probes)

        def unnamed(m):
            m.deployment("worker")["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = 9570
        self.assertCatches(check_probes, unnamed)

        def moved(m):
            env = pod_spec(m.deployment("broker"))["containers"][0]["env"]
            next(e for e in env if e["name"] == "ENLARGER_METRICS")["value"] = "0.0.0.0:9999"
        self.assertCatches(check_probes, moved)

    def test_the_worker_memory_limit_exceeds_its_budget(self):
        self.assertHolds(check_worker_memory)

        def budget(value):
            def breakage(m):
                env = pod_spec(m.deployment("worker"))["containers"][0]["env"]
                next(e for e in env if e["name"] == "ENLARGER_MEMORY_BUDGET")["value"] = value
            return breakage
        self.assertCatches(check_worker_memory, budget("1G"))
        self.assertCatches(check_worker_memory, budget("1.5G"))

    def test_concurrency_cpu_request_and_threshold_agree(self):
        self.assertHolds(check_concurrency)

        def threshold(m):
            m.kind("ScaledObject")[0]["spec"]["triggers"][0]["metadata"]["threshold"] = "8"
        self.assertCatches(check_concurrency, threshold)

    def test_every_secret_is_documented(self):
        self.assertHolds(check_secrets_documented)
        self.assertCatches(check_secrets_documented, lambda m: setattr(m, "readme", m.readme.replace(
            "create secret generic enlarger-broker-key", "create secret generic enlarger-server-key")))
        self.assertCatches(check_secrets_documented, lambda m: setattr(m, "readme", m.readme.replace(
            "--from-file=broker.pub=", "--from-file=server.pub=")))

    def test_secret_volumes_are_read_only_and_private(self):
        self.assertHolds(check_secret_volumes)

        def world_readable(m):
            volume(pod_spec(m.deployment("broker")), "client-keys")["secret"]["defaultMode"] = 0o444
        self.assertCatches(check_secret_volumes, world_readable)

    def test_keys_are_where_the_settings_say(self):
        self.assertHolds(check_key_paths)

        def straight_from_the_secret(m):
            env = pod_spec(m.deployment("worker"))["containers"][0]["env"]
            next(e for e in env if e["name"] == "ENLARGER_KEY")["value"] = "/etc/enlarger/worker-key/worker.key"
        self.assertCatches(check_key_paths, straight_from_the_secret)

    def test_pods_run_restricted(self):
        self.assertHolds(check_pod_security)

        def root(m):
            pod_spec(m.deployment("worker"))["securityContext"]["runAsNonRoot"] = False
        self.assertCatches(check_pod_security, root)

        def writable(m):
            pod_spec(m.deployment("broker"))["initContainers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
        self.assertCatches(check_pod_security, writable)

    def test_the_disruption_budget_selects_the_workers(self):
        self.assertHolds(check_disruption_budget)

        def broker(m):
            m.kind("PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "broker"
        self.assertCatches(check_disruption_budget, broker)

    def test_autoscalers_drive_the_worker_deployment(self):
        self.assertHolds(check_autoscalers)

        def broker(m):
            m.kind("ScaledObject")[0]["spec"]["scaleTargetRef"]["name"] = "enlarger-broker"
        self.assertCatches(check_autoscalers, broker)
        self.assertCatches(check_autoscalers, lambda m: m.kind("HorizontalPodAutoscaler")[0]["spec"].update(minReplicas=0))
        self.assertCatches(check_autoscalers, lambda m: m.deployment("worker")["spec"].update(replicas=3))

    def test_service_selectors_match_pod_labels(self):
        self.assertHolds(check_service_selectors)

        def wrong_label(m):
            m.kind("Service")[0]["spec"]["selector"]["app.kubernetes.io/component"] = "brokers"
        self.assertCatches(check_service_selectors, wrong_label)

        def wrong_port(m):
            m.kind("Service")[1]["spec"]["ports"][0]["targetPort"] = "worker"
        self.assertCatches(check_service_selectors, wrong_port)

    def test_workers_reach_a_broker_that_is_not_ready_yet(self):
        self.assertHolds(check_worker_service)

        def gated(m):
            for s in m.kind("Service"):
                s["spec"].pop("publishNotReadyAddresses", None)
        self.assertCatches(check_worker_service, gated)

        def client_service(m):
            env = pod_spec(m.deployment("worker"))["containers"][0]["env"]
            next(e for e in env if e["name"] == "ENLARGER_BROKER")["value"] = "tcp://enlarger-broker:5570"
        self.assertCatches(check_worker_service, client_service)

    def test_only_a_noted_client_port_leaves_the_cluster(self):
        self.assertHolds(check_exposure)
        # The README's example passes; without its note, or on the worker port, it does not.
        example = next(yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", self.manifests.readme, re.S)
                       if EXPOSURE_NOTE in block)

        def exposed(note=True, port="clients"):
            def breakage(m):
                service = next(s for s in m.kind("Service") if s["metadata"]["name"] == example["metadata"]["name"])
                service["spec"].update(example["spec"])
                service["spec"]["ports"][0]["targetPort"] = port
                if note:
                    service["metadata"]["annotations"] = example["metadata"]["annotations"]
            return breakage
        noted = self.manifests.copy()
        exposed()(noted)
        self.assertEqual(check_exposure(noted), [])
        self.assertCatches(check_exposure, exposed(note=False))
        self.assertCatches(check_exposure, exposed(port="workers"))

    def test_only_the_scraper_reaches_the_metrics_port(self):
        self.assertHolds(check_metrics_policy)
        self.assertCatches(check_metrics_policy, lambda m: m.files.pop("network-policy.yaml"))

        def rule(index):
            return lambda m: m.kind("NetworkPolicy")[0]["spec"]["ingress"][index]

        def open_to_all(m):
            rule(1)(m).pop("from")
        self.assertCatches(check_metrics_policy, open_to_all)

        def whole_namespace(m):
            rule(1)(m)["from"][0].pop("podSelector")
        self.assertCatches(check_metrics_policy, whole_namespace)

        def every_port(m):
            rule(0)(m).pop("ports")
        self.assertCatches(check_metrics_policy, every_port)

        def by_number(m):
            rule(0)(m)["ports"].append({"port": 9570, "protocol": "TCP"})
        self.assertCatches(check_metrics_policy, by_number)

        def a_network(m):
            rule(1)(m)["from"].append({"ipBlock": {"cidr": "10.0.0.0/8"}})
        self.assertCatches(check_metrics_policy, a_network)

    def test_there_is_one_broker(self):
        self.assertHolds(check_broker_is_single)
        self.assertCatches(check_broker_is_single, lambda m: m.deployment("broker")["spec"].update(strategy={"type": "RollingUpdate"}))

    def test_workers_have_time_to_drain(self):
        self.assertHolds(check_drain_time)
        self.assertCatches(check_drain_time, lambda m: pod_spec(m.deployment("worker")).update(terminationGracePeriodSeconds=2))

    def test_quantities_and_byte_counts_read_as_kubernetes_and_enlarger_read_them(self):
        self.assertEqual(quantity("1Gi"), 2**30)
        self.assertEqual(quantity("1G"), 10**9)
        self.assertEqual(quantity("250m"), 0.25)
        self.assertEqual(enlarger_bytes("768M"), 768 * 2**20)
        self.assertEqual(enlarger_bytes("1.5GiB"), 3 * 2**29)
        with self.assertRaises(ValueError):
            quantity("1 gig")


if __name__ == "__main__":
    unittest.main()
