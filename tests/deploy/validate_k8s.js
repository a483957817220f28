// Validates deploy/kubernetes offline: renders the base and every overlay (kustomize_lite.js;
// also `kubectl kustomize` when given, which must agree), then checks each resource against the
// Kubernetes API schemas of the kubernetes-models package (types, required fields, enums), for
// fields the API does not have (the schemas allow them; the package's type declarations list the
// real ones: a misspelt readOnlyRootFilesystem would otherwise pass and protect nothing), and for
// what issue 20 asks of the deployment (probes, securityContext, PVC, NetworkPolicy ports, PDBs).
// Usage: node validate_k8s.js DEPLOY_KUBERNETES_DIR [KUBECTL]. Exit 1 naming every problem.
"use strict";
const fs = require("fs");
const path = require("path");
const {execFileSync} = require("child_process");
const YAML = require("yaml");
const {render, YAML_1_1} = require("./kustomize_lite.js");

const root = path.resolve(process.argv[2]);
const kubectl = process.argv[3];
const problems = [];
const fail = (where, msg) => problems.push(`${where}: ${msg}`);

// ---- Schema: the model class for apiVersion/kind, and its validate().
const MODELS = path.dirname(require.resolve("kubernetes-models/package.json"));
function modelDir(apiVersion) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  return group ? path.join(MODELS, group, version) : path.join(MODELS, version);
}
function validateSchema(r, where) {
  const file = path.join(modelDir(r.apiVersion), r.kind + ".js");
  if (!fs.existsSync(file)) return fail(where, `unknown apiVersion/kind ${r.apiVersion} ${r.kind}`);
  const Model = require(file)[r.kind];
  try {
    new Model(r).validate();
  } catch (e) {
    fail(where, e.message);
  }
}

// ---- Unknown fields, from the .d.ts declarations: interface -> {field: type text}.
const interfaces = new Map();  // .d.ts path -> {fields, imports}
function parseDts(file) {
  if (interfaces.has(file)) return interfaces.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = {};
  for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) imports[m[1]] = m[2];
  let fields = null;
  const body = text.match(/export interface I\w+(?: extends [\w, ]+)? \{\n([\s\S]*?)\n\}/);
  if (body) {
    fields = {};
    const lines = body[1].split("\n");
    for (let i = 0; i < lines.length; i++) {
      const m = lines[i].match(/^    "([^"]+)"\??: (.*)$/);
      if (!m) continue;
      let type = m[2];
      // Maps span three lines: `{`, `[key: string]: T;`, `};` (also inside Array<...>).
      if (type === "{" || type === "Array<{") {
        const v = lines[i + 1].match(/\[key: string\]: (.*);$/);
        type = (type === "{" ? "MAP " : "ARRAY MAP ") + (v ? v[1] : "any");
        i += 2;
      }
      fields[m[1]] = type.replace(/;$/, "");
    }
  }
  const parsed = {fields, imports, dir: path.dirname(file)};
  interfaces.set(file, parsed);
  return parsed;
}
function resolveImport(from, name) {
  const spec = from.imports[name];
  if (!spec) return null;
  const base = spec.startsWith(".") ? path.join(from.dir, spec)
                                    : path.join(path.dirname(MODELS), spec);  // @kubernetes-models/...
  return fs.existsSync(base + ".d.ts") ? base + ".d.ts" : null;
}
function checkFields(value, type, from, where) {
  if (value == null || typeof value !== "object") return;
  let t = type;
  if (t.startsWith("ARRAY MAP ")) {
    for (const [i, v] of (Array.isArray(value) ? value : []).entries()) {
      for (const [k, x] of Object.entries(v || {})) checkFields(x, t.slice(10), from, `${where}[${i}].${k}`);
    }
    return;
  }
  if (t.startsWith("MAP ")) {
    for (const [k, x] of Object.entries(value)) checkFields(x, t.slice(4), from, `${where}.${k}`);
    return;
  }
  const arr = t.match(/^Array<(.*)>$/);
  if (arr) {
    if (Array.isArray(value)) value.forEach((x, i) => checkFields(x, arr[1], from, `${where}[${i}]`));
    return;
  }
  if (!/^I\w+$/.test(t)) return;  // a primitive, a union of literals, any
  const file = resolveImport(from, t);
  // A reference this parser cannot follow would leave a subtree unchecked: say so.
  if (!file) return fail(where, `validate_k8s.js cannot resolve the type ${t}`);
  checkObject(value, parseDts(file), where);
}
function checkObject(value, iface, where) {
  if (!iface.fields) return;  // a type alias (IntOrString, Quantity...)
  for (const [k, v] of Object.entries(value)) {
    if (k === "apiVersion" || k === "kind") continue;  // TypeMeta, checked by the schema
    if (!(k in iface.fields)) fail(where, `unknown field '${k}' (the API has: ${Object.keys(iface.fields).join(", ")})`);
    else checkFields(v, iface.fields[k], iface, `${where}.${k}`);
  }
}
function validateFields(r, where) {
  const file = path.join(modelDir(r.apiVersion), r.kind + ".d.ts");
  if (fs.existsSync(file)) checkObject(r, parseDts(file), where);
}

// ---- What the deployment must have.
function podSpecOf(r) {
  return r.spec && r.spec.template ? r.spec.template.spec : null;
}
function checkPolicy(resources, where) {
  const byKind = (k) => resources.filter((r) => r.kind === k);
  const get = (k, n) => resources.find((r) => r.kind === k && r.metadata.name === n);
  for (const r of resources) {
    const w = `${where} ${r.kind}/${r.metadata.name}`;
    if (r.kind !== "Namespace" && r.metadata.namespace !== "hvd") fail(w, "not in namespace hvd");
    const spec = podSpecOf(r);
    if (!spec) continue;
    const psc = spec.securityContext || {};
    if (psc.runAsNonRoot !== true) fail(w, "pod securityContext.runAsNonRoot is not true");
    if (!psc.seccompProfile || psc.seccompProfile.type !== "RuntimeDefault") fail(w, "no RuntimeDefault seccomp");
    if (spec.automountServiceAccountToken !== false) fail(w, "mounts a service account token");
    if (!spec.serviceAccountName || !get("ServiceAccount", spec.serviceAccountName)) {
      fail(w, `service account ${spec.serviceAccountName} is not defined`);
    }
    const all = [...spec.containers, ...(spec.initContainers || [])];
    for (const c of all) {
      const sc = c.securityContext || {};
      const cw = `${w} container ${c.name}`;
      if (sc.allowPrivilegeEscalation !== false) fail(cw, "allowPrivilegeEscalation is not false");
      if (sc.readOnlyRootFilesystem !== true) fail(cw, "readOnlyRootFilesystem is not true");
      if (sc.privileged) fail(cw, "privileged");
      if (!sc.capabilities || !(sc.capabilities.drop || []).includes("ALL")) fail(cw, "capabilities not dropped");
      if ((sc.capabilities && sc.capabilities.add || []).length) fail(cw, "adds capabilities");
      if (!c.resources || !c.resources.requests) fail(cw, "no resource requests");
      if (!/^hvd:[\w.-]+$/.test(c.image)) fail(cw, `image ${c.image} is not hvd:TAG`);
      for (const m of c.volumeMounts || []) {
        const known = (spec.volumes || []).some((v) => v.name === m.name) ||
          (r.spec.volumeClaimTemplates || []).some((v) => v.metadata.name === m.name);
        if (!known) fail(cw, `mounts undefined volume ${m.name}`);
      }
    }
    for (const c of spec.containers) {
      if (!c.readinessProbe || !c.livenessProbe) fail(`${w} container ${c.name}`, "no readiness or liveness probe");
    }
    // Every file a container is pointed at (--flag=/path) must be on one of its mounts.
    for (const c of spec.containers) {
      for (const a of c.args || []) {
        const m = a.match(/^--(token-file|tls-cert|tls-key|tls-ca|state-dir)=(\/.*)$/);
        if (m && !(c.volumeMounts || []).some((v) => (m[2] === v.mountPath || m[2].startsWith(v.mountPath + "/")))) {
          fail(`${w} container ${c.name}`, `${a}: no volume mounted there`);
        }
      }
    }
  }
  const sts = get("StatefulSet", "hvd-launcherd");
  if (!sts) {
    fail(where, "no StatefulSet hvd-launcherd");
  } else {
    const c = sts.spec.template.spec.containers[0];
    const state = (c.args || []).find((a) => a.startsWith("--state-dir="));
    const pvcs = (sts.spec.volumeClaimTemplates || []).map((v) => v.metadata.name);
    const onPvc = state && (c.volumeMounts || []).some((m) => pvcs.includes(m.name) &&
                                                             state.slice(12).startsWith(m.mountPath));
    if (!onPvc) fail(where, "the launcher's --state-dir is not on a volumeClaimTemplate");
    if (sts.spec.replicas !== 1) fail(where, "the launcher must have exactly one replica");
    if (!(c.readinessProbe.httpGet && c.readinessProbe.httpGet.path === "/healthz")) {
      fail(where, "the launcher's readiness probe is not GET /healthz");
    }
    const ann = sts.spec.template.metadata.annotations || {};
    if (ann["prometheus.io/scrape"] !== "true") fail(where, "no Prometheus scrape annotation");
    // The NetworkPolicy must admit exactly the launcher's container ports, and nothing else.
    const ports = new Set(c.ports.map((p) => p.containerPort));
    const np = byKind("NetworkPolicy").find((n) => n.spec.podSelector.matchLabels &&
      n.spec.podSelector.matchLabels["app.kubernetes.io/name"] === "hvd-launcherd");
    if (!np) {
      fail(where, "no NetworkPolicy selects the launcher");
    } else {
      const admitted = new Set(np.spec.ingress.flatMap((i) => (i.ports || []).map((p) => p.port)));
      for (const p of ports) if (!admitted.has(p)) fail(where, `NetworkPolicy does not admit port ${p}`);
      for (const p of admitted) if (!ports.has(p)) fail(where, `NetworkPolicy admits ${p}, not a launcher port`);
      if (np.spec.ingress.some((i) => !i.from || !i.from.length)) fail(where, "NetworkPolicy admits everyone");
    }
  }
  if (!get("DaemonSet", "hvd-agent")) fail(where, "no DaemonSet hvd-agent");
  for (const w of [...byKind("StatefulSet"), ...byKind("DaemonSet")]) {
    const labels = w.spec.template.metadata.labels;
    const pdb = byKind("PodDisruptionBudget").find((p) =>
      Object.entries(p.spec.selector.matchLabels).every(([k, v]) => labels[k] === v));
    if (!pdb) fail(where, `no PodDisruptionBudget for ${w.kind}/${w.metadata.name}`);
  }
  if (!get("Namespace", "hvd")) fail(where, "no Namespace hvd");
}

// ---- Every kustomization under root; every YAML file must be read by one of them.
function kustomizations(dir) {
  const out = fs.existsSync(path.join(dir, "kustomization.yaml")) ? [dir] : [];
  for (const e of fs.readdirSync(dir, {withFileTypes: true})) {
    if (e.isDirectory()) out.push(...kustomizations(path.join(dir, e.name)));
  }
  return out;
}
function yamlFiles(dir) {
  return fs.readdirSync(dir, {withFileTypes: true}).flatMap((e) =>
    e.isDirectory() ? yamlFiles(path.join(dir, e.name))
                    : /\.ya?ml$/.test(e.name) ? [path.join(dir, e.name)] : []);
}
const key = (r) => `${r.kind}/${r.metadata.namespace || ""}/${r.metadata.name}`;
const sortKeys = (x) => Array.isArray(x) ? x.map(sortKeys)
  : x && typeof x === "object" ? Object.fromEntries(Object.keys(x).sort().map((k) => [k, sortKeys(x[k])])) : x;

const read = new Set();
let count = 0;
const dirs = kustomizations(root);
if (!dirs.length) fail(root, "no kustomization.yaml");
for (const dir of dirs) {
  const where = path.relative(root, dir) || ".";
  let rendered;
  try {
    rendered = render(dir);
  } catch (e) {
    fail(where, e.message);
    continue;
  }
  rendered.files.forEach((f) => read.add(path.resolve(f)));
  for (const r of rendered.resources) {
    const w = `${where} ${r.kind}/${r.metadata && r.metadata.name}`;
    validateSchema(r, w);
    validateFields(r, w);
    count++;
  }
  checkPolicy(rendered.resources, where);
  if (kubectl) {
    let theirs;
    try {
      theirs = YAML.parseAllDocuments(execFileSync(kubectl, ["kustomize", dir], {encoding: "utf8"}), YAML_1_1)
                   .map((d) => d.toJS()).filter(Boolean);
    } catch (e) {
      fail(where, `kubectl kustomize failed: ${e.message}`);
      continue;
    }
    const mine = new Map(rendered.resources.map((r) => [key(r), JSON.stringify(sortKeys(r))]));
    for (const r of theirs) {
      validateSchema(r, `${where} (kubectl) ${r.kind}/${r.metadata.name}`);
      if (mine.get(key(r)) !== JSON.stringify(sortKeys(r))) {
        fail(where, `kubectl kustomize renders ${key(r)} differently from kustomize_lite.js`);
      }
      mine.delete(key(r));
    }
    for (const k of mine.keys()) fail(where, `kubectl kustomize does not render ${k}`);
  }
}
for (const f of yamlFiles(root)) {
  if (!read.has(path.resolve(f))) fail(path.relative(root, f), "no kustomization reads this file");
}

if (problems.length) {
  console.log(problems.map((p) => "FAIL: " + p).join("\n"));
  process.exit(1);
}
console.log(`${count} resources in ${dirs.length} kustomizations valid` +
            (kubectl ? " (and rendered alike by kubectl kustomize)" : ""));
