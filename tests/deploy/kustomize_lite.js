// The part of kustomize that deploy/kubernetes uses, so that k8s_manifests_test.sh can render
// every overlay where `kubectl kustomize` is not installed (Debian has no kustomize package):
// resources (files and directories), patches (strategic merge or JSON 6902, with a target),
// images (newName, newTag) and namespace. Anything else in a kustomization.yaml is an error, so a
// feature this file does not know about cannot be silently skipped. Where kubectl is installed the
// test also renders with it and requires the same resources.
"use strict";
const fs = require("fs");
const path = require("path");
const YAML = require("yaml");
// YAML 1.1, as kustomize and the API server read it: 0440 is octal (288), not 440.
const YAML_1_1 = {version: "1.1"};

const KNOWN_KEYS = new Set(["apiVersion", "kind", "resources", "patches", "images", "namespace"]);
// Kinds that live outside namespaces (only those deploy/ could use).
const CLUSTER_SCOPED = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
                                "StorageClass", "PriorityClass"]);
// Strategic merge keys of the lists deploy/ patches (from the API's x-kubernetes-patch-merge-key).
const MERGE_KEYS = {containers: "name", initContainers: "name", volumes: "name", env: "name",
                    volumeMounts: "mountPath", imagePullSecrets: "name"};

function readDocs(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"), YAML_1_1);
  for (const d of docs) {
    if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
  }
  return docs.map((d) => d.toJS()).filter((o) => o != null);
}

function strategicMerge(base, patch, key) {
  if (patch === null) return undefined;
  if (Array.isArray(patch)) {
    const mk = MERGE_KEYS[key];
    if (!mk || !Array.isArray(base)) return structuredClone(patch);
    // Items new to the list go first, in the patch's order, as kustomize puts them.
    const out = base.map((x) => structuredClone(x));
    const added = [];
    for (const item of patch) {
      const i = out.findIndex((x) => x && item && x[mk] === item[mk]);
      if (i < 0) added.push(structuredClone(item));
      else out[i] = strategicMerge(out[i], item, undefined);
    }
    return [...added, ...out];
  }
  if (typeof patch === "object") {
    const out = base && typeof base === "object" && !Array.isArray(base) ? {...base} : {};
    for (const [k, v] of Object.entries(patch)) {
      const merged = strategicMerge(out[k], v, k);
      if (merged === undefined) delete out[k];
      else out[k] = merged;
    }
    return out;
  }
  return patch;
}

// JSON 6902 (add, replace, remove) on a JSON pointer.
function jsonPatch(obj, ops, where) {
  for (const op of ops) {
    const parts = op.path.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
    const last = parts.pop();
    let parent = obj;
    for (const p of parts) {
      if (parent == null || !(p in parent)) throw new Error(`${where}: ${op.path}: no ${p}`);
      parent = parent[p];
    }
    if (op.op === "add" && Array.isArray(parent)) {
      if (last === "-") parent.push(op.value);
      else parent.splice(Number(last), 0, op.value);
    } else if (op.op === "add" || op.op === "replace") {
      if (op.op === "replace" && !(last in parent)) throw new Error(`${where}: ${op.path}: absent`);
      parent[last] = op.value;
    } else if (op.op === "remove") {
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else {
      throw new Error(`${where}: unsupported JSON patch op ${op.op}`);
    }
  }
}

function podSpecs(r) {
  const s = r.spec || {};
  if (s.template && s.template.spec) return [s.template.spec];
  if (s.jobTemplate) return [s.jobTemplate.spec.template.spec];
  return r.kind === "Pod" ? [s] : [];
}

// Renders the kustomization in `dir`: {resources, files} where files are every file it read.
function render(dir) {
  const kfile = path.join(dir, "kustomization.yaml");
  const [k] = readDocs(kfile);
  for (const key of Object.keys(k)) {
    if (!KNOWN_KEYS.has(key)) throw new Error(`${kfile}: '${key}' is not supported by kustomize_lite.js`);
  }
  const files = [kfile];
  let resources = [];
  for (const r of k.resources || []) {
    const p = path.join(dir, r);
    if (fs.statSync(p).isDirectory()) {
      const sub = render(p);
      resources.push(...sub.resources);
      files.push(...sub.files);
    } else {
      resources.push(...readDocs(p));
      files.push(p);
    }
  }
  for (const patch of k.patches || []) {
    if (!patch.path || !patch.target) throw new Error(`${kfile}: a patch needs path and target`);
    const p = path.join(dir, patch.path);
    files.push(p);
    const [content] = YAML.parseAllDocuments(fs.readFileSync(p, "utf8"), YAML_1_1).map((d) => d.toJS());
    const hits = resources.filter((r) => r.kind === patch.target.kind &&
                                         r.metadata.name === patch.target.name);
    if (hits.length !== 1) throw new Error(`${p}: target matches ${hits.length} resources, not 1`);
    const i = resources.indexOf(hits[0]);
    if (Array.isArray(content)) jsonPatch(resources[i], content, p);
    else resources[i] = strategicMerge(resources[i], content, undefined);
  }
  for (const img of k.images || []) {
    for (const r of resources) {
      for (const spec of podSpecs(r)) {
        for (const c of [...(spec.containers || []), ...(spec.initContainers || [])]) {
          const [name, tag] = c.image.split(":");
          if (name !== img.name) continue;
          c.image = (img.newName || name) + ":" + (img.newTag || tag || "latest");
        }
      }
    }
  }
  if (k.namespace) {
    for (const r of resources) {
      if (!CLUSTER_SCOPED.has(r.kind)) r.metadata.namespace = k.namespace;
    }
  }
  return {resources, files};
}

module.exports = {render, readDocs, YAML_1_1};
