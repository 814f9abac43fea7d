// The settings the server reads (initializationOptions and the `tachy` section of
// workspace/configuration). The extension's own settings (serverPath, pythonPath,
// trace) stay out: the server reports keys it does not know.

export type Get = <T>(key: string) => T | undefined;

export interface ServerSettings {
    policy?: string;
    approval?: "review" | "auto";
    maxTurns?: number;
    sandbox?: "auto" | "bubblewrap" | "none";
    allowSecrets?: boolean;
    index?: { enabled?: boolean; dense?: boolean; embedder?: "static" | "minilm" };
}

/** Server settings from a `tachy` configuration section. An unset policy is left out,
 * so the server's TACHY_POLICY environment variable still applies. */
export function serverSettings(get: Get): ServerSettings {
    const settings: ServerSettings = {};
    const policy = get<string | null>("policy");
    if (typeof policy === "string" && policy.trim()) {
        settings.policy = policy.trim();
    }
    const approval = get<string>("approval");
    if (approval === "review" || approval === "auto") {
        settings.approval = approval;
    }
    const maxTurns = get<number>("maxTurns");
    if (typeof maxTurns === "number") {
        settings.maxTurns = maxTurns;
    }
    const sandbox = get<string>("sandbox");
    if (sandbox === "auto" || sandbox === "bubblewrap" || sandbox === "none") {
        settings.sandbox = sandbox;
    }
    const allowSecrets = get<boolean>("allowSecrets");
    if (typeof allowSecrets === "boolean") {
        settings.allowSecrets = allowSecrets;
    }
    const index: NonNullable<ServerSettings["index"]> = {};
    const enabled = get<boolean>("index.enabled");
    const dense = get<boolean>("index.dense");
    if (typeof enabled === "boolean") {
        index.enabled = enabled;
    }
    if (typeof dense === "boolean") {
        index.dense = dense;
    }
    const embedder = get<string>("index.embedder");
    if (embedder === "static" || embedder === "minilm") {
        index.embedder = embedder;
    }
    if (Object.keys(index).length > 0) {
        settings.index = index;
    }
    return settings;
}

// Every key the extension reads (under `tachy.`), for telling which workspace values
// it ignores.
export const SETTING_KEYS = [
    "serverPath",
    "pythonPath",
    "policy",
    "approval",
    "maxTurns",
    "sandbox",
    "allowSecrets",
    "index.enabled",
    "index.dense",
    "index.embedder",
];

/** The values in effect (see trust.ts for which scopes count): the two that say how
 * the server is started, and what it is sent. */
export interface Effective {
    serverPath: string;
    pythonPath: string;
    trusted: boolean;
    settings: ServerSettings;
}

export type ChangeAction = { action: "restart"; why: string } | { action: "send" } | { action: "none" };

/** What a configuration change calls for, from the effective values before and after.
 * Comparing effective values, not the keys VS Code says were touched, means a
 * workspace value of a user-only setting (ignored) restarts nothing and sends
 * nothing. */
export function changeAction(before: Effective, after: Effective): ChangeAction {
    for (const key of ["serverPath", "pythonPath"] as const) {
        if (before[key] !== after[key]) {
            return { action: "restart", why: `tachy.${key} changed` };
        }
    }
    if (before.trusted !== after.trusted) {
        return { action: "restart", why: "the workspace's trust changed" };
    }
    if (before.settings.policy !== undefined && after.settings.policy === undefined) {
        // A cleared policy cannot be sent (null would override TACHY_POLICY); a new
        // server starts from its environment's default again.
        return { action: "restart", why: "tachy.policy was cleared" };
    }
    if (JSON.stringify(before.settings) !== JSON.stringify(after.settings)) {
        return { action: "send" };
    }
    return { action: "none" };
}
