// node validate_objects.js MODULES FILE...: validates each Kubernetes object
// (one JSON object per file) against the published schemas with the
// kubernetes-models package installed under MODULES. Kinds it does not
// carry (cert-manager, Prometheus operator) are listed as not checked.
const path = require("path");
const fs = require("fs");
const [modules, ...files] = process.argv.slice(2);
const load = (group) => require(path.join(path.resolve(modules), "kubernetes-models", group));
load("v1");  // the package itself must be there: a missing one fails, it never skips
let failed = 0;
for (const file of files) {
  const obj = JSON.parse(fs.readFileSync(file, "utf8"));
  const group = obj.apiVersion === "v1" ? "v1" : obj.apiVersion;
  let cls;
  try {
    cls = load(group)[obj.kind];
  } catch (e) {
    cls = undefined;
  }
  const name = `${path.basename(file)}: ${obj.kind} ${obj.metadata && obj.metadata.name}`;
  if (!cls) {
    console.log(`${name}: not a kind kubernetes-models carries (${obj.apiVersion}): not checked`);
    continue;
  }
  try {
    new cls(obj).validate();
    console.log(`${name}: valid`);
  } catch (e) {
    failed++;
    console.log(`${name}: INVALID: ${e.message}`);
  }
}
process.exit(failed ? 1 : 0);
