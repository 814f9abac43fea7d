// Which command starts the tachy language server. Pure (the file system is passed
// in), so the unit tests can check every branch without VS Code.
//
// The server runs on the host, outside the agent's sandbox, and the agent's commands
// can write anything in the workspace. So nothing inside a workspace folder is ever
// started by discovery: not a workspace's .venv/bin/tachy, not a PATH entry that
// points into the workspace (a shell with the project's venv activated), not a
// relative PATH entry (resolved against the working directory, the workspace). Such
// a tachy is only reported (workspaceServers), and the user can choose it with
// tachy.serverPath in their user settings.

import * as path from "node:path";

// Where the command came from, shown in the log and the status bar's tooltip.
export type ServerSource = "serverPath" | "pythonPath" | "PATH";

export interface ServerCommand {
    command: string;
    args: string[];
    source: ServerSource;
}

export interface DiscoveryInput {
    serverPath?: string; // tachy.serverPath, from user settings only (trust.ts)
    pythonPath?: string; // tachy.pythonPath, likewise
    workspaceFolders: string[]; // file system paths
    envPath?: string; // the PATH environment variable
    home?: string; // for a leading ~ in settings
    platform?: NodeJS.Platform;
    isExecutable: (file: string) => boolean;
    realpath?: (file: string) => string; // symlinks resolved (identity when absent)
}

// Runs the server with an interpreter whose environment has tachy but no `tachy`
// script next to it (a conda base, a system Python with a user install). `python -c`
// puts the working directory (the workspace) first on sys.path, where a planted
// server/cli.py would be imported: only absolute entries are kept.
export const PYTHON_SERVE =
    "import os, sys; sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]; " +
    "from server.cli import main; sys.exit(main(sys.argv[1:]))";

export class DiscoveryError extends Error {}

const SOURCE_TEXT: Record<ServerSource, string> = {
    serverPath: "tachy.serverPath in your user settings",
    pythonPath: "tachy.pythonPath in your user settings",
    PATH: "tachy on PATH",
};

/** "/usr/bin/tachy serve (from tachy on PATH)": what runs, and why that one. */
export function describeServer(command: ServerCommand): string {
    return `${command.command} ${command.args[0] === "-c" ? "-c … serve" : command.args.join(" ")} (from ${SOURCE_TEXT[command.source]})`;
}

function pathModule(platform: NodeJS.Platform): path.PlatformPath {
    return platform === "win32" ? path.win32 : path.posix;
}

function expand(setting: string, input: DiscoveryInput): string {
    const value = setting.trim();
    if (input.home && (value === "~" || value.startsWith("~/"))) {
        return pathModule(input.platform ?? process.platform).join(input.home, value.slice(1));
    }
    return value;
}

function scriptDir(platform: NodeJS.Platform): string {
    return platform === "win32" ? "Scripts" : "bin";
}

function exe(name: string, platform: NodeJS.Platform): string {
    return platform === "win32" ? `${name}.exe` : name;
}

/** Whether `file` lies in one of the workspace folders, as written or with its
 * symlinks resolved (a link in the workspace, or a link out of it into it). */
export function insideWorkspace(file: string, input: DiscoveryInput): boolean {
    const p = pathModule(input.platform ?? process.platform);
    const real = input.realpath ?? ((f: string) => f);
    const within = (f: string, folder: string) => {
        const rel = p.relative(folder, f);
        return rel === "" || (!rel.startsWith("..") && !p.isAbsolute(rel));
    };
    return input.workspaceFolders.some((folder) => {
        const folders = [folder, real(folder)];
        return [file, real(file)].some((f) => folders.some((d) => within(f, d)));
    });
}

/** The absolute directories of PATH, in order: an empty or relative entry means the
 * working directory (the workspace), so it is left out. */
function pathDirs(input: DiscoveryInput): string[] {
    const platform = input.platform ?? process.platform;
    const separator = platform === "win32" ? ";" : ":";
    return (input.envPath ?? "").split(separator).filter((dir) => dir && pathModule(platform).isAbsolute(dir));
}

function userPath(setting: string, value: string, input: DiscoveryInput): string {
    const file = expand(value, input);
    if (!pathModule(input.platform ?? process.platform).isAbsolute(file)) {
        // Relative to what? The extension host's working directory: not a choice.
        throw new DiscoveryError(`${setting} ${file} must be an absolute path`);
    }
    if (!input.isExecutable(file)) {
        throw new DiscoveryError(`${setting} ${file} is not an executable file`);
    }
    return file;
}

/** The server command, from the first of: tachy.serverPath, tachy.pythonPath,
 * `tachy` on PATH outside the workspace. A setting that names a missing file is an
 * error (never silently skipped: the user asked for that one). */
export function findServer(input: DiscoveryInput): ServerCommand {
    const platform = input.platform ?? process.platform;
    const p = pathModule(platform);
    const tachy = exe("tachy", platform);
    if (input.serverPath?.trim()) {
        return { command: userPath("tachy.serverPath", input.serverPath, input), args: ["serve"], source: "serverPath" };
    }
    if (input.pythonPath?.trim()) {
        const python = userPath("tachy.pythonPath", input.pythonPath, input);
        const script = p.join(p.dirname(python), tachy);
        if (input.isExecutable(script)) {
            return { command: script, args: ["serve"], source: "pythonPath" };
        }
        return { command: python, args: ["-c", PYTHON_SERVE, "serve"], source: "pythonPath" };
    }
    for (const dir of pathDirs(input)) {
        const script = p.join(dir, tachy);
        if (input.isExecutable(script) && !insideWorkspace(script, input)) {
            return { command: script, args: ["serve"], source: "PATH" };
        }
    }
    const found = workspaceServers(input);
    throw new DiscoveryError(
        "no tachy server found on PATH" +
            (found.length ? ` (${found.join(", ")} in the workspace is not started automatically)` : "") +
            "; set tachy.serverPath in your user settings to the tachy executable, or tachy.pythonPath " +
            "to a Python environment with tachy installed",
    );
}

/** The tachy executables inside the workspace that discovery passes over: each
 * folder's .venv, and PATH entries that lead into a folder. Reported, never run. */
export function workspaceServers(input: DiscoveryInput): string[] {
    const platform = input.platform ?? process.platform;
    const p = pathModule(platform);
    const tachy = exe("tachy", platform);
    const found = input.workspaceFolders.map((folder) => p.join(folder, ".venv", scriptDir(platform), tachy));
    for (const dir of pathDirs(input)) {
        const script = p.join(dir, tachy);
        if (insideWorkspace(script, input)) {
            found.push(script);
        }
    }
    return [...new Set(found)].filter((file) => input.isExecutable(file));
}
