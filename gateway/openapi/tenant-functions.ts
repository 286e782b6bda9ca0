// A tenant's deployed functions as the OpenAPI document shows them: read from the registry (not
// the functions cache: the document needs no compiled validator).
import type { Registry } from '../../core/registry.ts';
import { plainName } from '../../core/names.ts';
import type { DeployedFunction } from './function-paths.ts';

export async function tenantFunctions(registry: Pick<Registry, 'list' | 'active'>, tenant: string): Promise<DeployedFunction[]> {
  const owned = (await registry.list()).filter((f) => f.tenant === tenant);
  const manifests = await Promise.all(owned.map((f) => registry.active(f.name)));
  return manifests.flatMap((m) => (m ? [{ name: plainName(m.name), version: m.version, inputSchema: m.inputSchema, ...(m.binaryInput !== undefined ? { binaryInput: m.binaryInput } : {}) }] : []));
}
