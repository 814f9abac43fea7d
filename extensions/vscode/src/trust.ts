// What the extension takes from the workspace, and what it does not. The agent's
// commands may write anything in the workspace (the sandbox leaves it writable), so
// a workspace's .vscode/settings.json is no more trustworthy than the agent: a
// setting that names a program the host runs, or that weakens a promise (the
// sandbox, secrets, review of edits, which model drives the agent and receives the
// code) is read from the user's own settings only. In an untrusted workspace (VS
// Code's Restricted Mode) no workspace value is read at all and the agent is off.
// Pure (settings come in through `inspect`), for the unit tests.

import type { Get, ServerSettings } from "./settings";

/** Keys (under `tachy.`) read from user or machine settings only, never from the
 * workspace or a folder. package.json gives each a scope VS Code never takes from a
 * workspace, and lists them in restrictedConfigurations (tests/extensions/
 * test_vscode.py checks that the three agree): "machine" for the two paths (a file
 * on the machine the extension runs on: in a remote window, set in Remote
 * settings), "application" for the others (your preferences, in every window). */
export const USER_ONLY_SETTINGS = ["serverPath", "pythonPath", "policy", "approval", "sandbox", "allowSecrets"];

/** What WorkspaceConfiguration.inspect returns (the fields used here). */
export interface Inspected<T> {
    defaultValue?: T;
    globalValue?: T;
    workspaceValue?: T;
    workspaceFolderValue?: T;
}

export type Inspect = <T>(key: string) => Inspected<T> | undefined;

export function isUserOnly(key: string): boolean {
    return USER_ONLY_SETTINGS.includes(key);
}

/** The value tachy uses. A user-only setting, or any setting in an untrusted
 * workspace: the user's value, else the default. Otherwise VS Code's order: folder,
 * workspace, user, default. */
export function effectiveValue<T>(key: string, inspected: Inspected<T> | undefined, trusted: boolean): T | undefined {
    if (!inspected) {
        return undefined;
    }
    if (!trusted || isUserOnly(key)) {
        return inspected.globalValue !== undefined ? inspected.globalValue : inspected.defaultValue;
    }
    for (const value of [inspected.workspaceFolderValue, inspected.workspaceValue, inspected.globalValue]) {
        if (value !== undefined) {
            return value;
        }
    }
    return inspected.defaultValue;
}

/** A getter for settings.ts that reads only what may be trusted. */
export function effectiveGetter(inspect: Inspect, trusted: boolean): Get {
    return <T>(key: string) => effectiveValue<T>(key, inspect<T>(key), trusted);
}

/** The keys whose workspace or folder value is ignored (user-only ones, or all of
 * `keys` in an untrusted workspace), to tell the user why their value does nothing. */
export function ignoredWorkspaceSettings(inspect: Inspect, keys: string[], trusted: boolean): string[] {
    return keys.filter((key) => {
        if (trusted && !isUserOnly(key)) {
            return false;
        }
        const inspected = inspect(key);
        return inspected?.workspaceValue !== undefined || inspected?.workspaceFolderValue !== undefined;
    });
}

/** The server's settings in Restricted Mode. The extension starts no agent run
 * there; should one start anyway, it gets the safest settings: every edit waits for
 * review, no secrets, and commands run in bubblewrap or not at all (the server
 * refuses them when bubblewrap is missing rather than running them bare). */
export function restrictedSettings(settings: ServerSettings): ServerSettings {
    return { ...settings, approval: "review", sandbox: "bubblewrap", allowSecrets: false };
}

export const RESTRICTED_MODE =
    "Restricted Mode (this workspace is not trusted): search works; the agent is off and workspace settings are ignored until you trust the workspace.";
