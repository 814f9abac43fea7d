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

// Settings that change how the server is started: a change restarts it. The others
// are sent with workspace/didChangeConfiguration.
export const RESTART_SETTINGS = ["tachy.serverPath", "tachy.pythonPath"];
