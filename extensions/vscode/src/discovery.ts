// Which command starts the tachy language server. Pure (the file system is passed
// in), so the unit tests can check every branch without VS Code.

import * as path from "node:path";

export interface ServerCommand {
    command: string;
    args: string[];
    source: string; // where it came from, for the log: "tachy.serverPath", ".venv", ...
}

export interface DiscoveryInput {
    serverPath?: string; // tachy.serverPath
    pythonPath?: string; // tachy.pythonPath
    workspaceFolders: string[]; // file system paths
    envPath?: string; // the PATH environment variable
    home?: string; // for a leading ~ in settings
    platform?: NodeJS.Platform;
    isExecutable: (file: string) => boolean;
}

// Runs the server with an interpreter whose environment has tachy but no `tachy`
// script next to it (a conda base, a system Python with a user install).
export const PYTHON_SERVE = "import sys; from server.cli import main; sys.exit(main(sys.argv[1:]))";

export class DiscoveryError extends Error {}

function expand(setting: string, input: DiscoveryInput): string {
    const value = setting.trim();
    if (input.home && (value === "~" || value.startsWith("~/"))) {
        return path.join(input.home, value.slice(1));
    }
    return value;
}

function scriptDir(platform: NodeJS.Platform): string {
    return platform === "win32" ? "Scripts" : "bin";
}

function exe(name: string, platform: NodeJS.Platform): string {
    return platform === "win32" ? `${name}.exe` : name;
}

/** The server command, from the first of: tachy.serverPath, tachy.pythonPath, each
 * workspace folder's .venv, `tachy` on PATH. A setting that names a missing file is
 * an error (never silently skipped: the user asked for that one). */
export function findServer(input: DiscoveryInput): ServerCommand {
    const platform = input.platform ?? process.platform;
    const tachy = exe("tachy", platform);
    if (input.serverPath?.trim()) {
        const file = expand(input.serverPath, input);
        if (!input.isExecutable(file)) {
            throw new DiscoveryError(`tachy.serverPath ${file} is not an executable file`);
        }
        return { command: file, args: ["serve"], source: "tachy.serverPath" };
    }
    if (input.pythonPath?.trim()) {
        const python = expand(input.pythonPath, input);
        if (!input.isExecutable(python)) {
            throw new DiscoveryError(`tachy.pythonPath ${python} is not an executable file`);
        }
        const script = path.join(path.dirname(python), tachy);
        if (input.isExecutable(script)) {
            return { command: script, args: ["serve"], source: "tachy.pythonPath" };
        }
        return { command: python, args: ["-c", PYTHON_SERVE, "serve"], source: "tachy.pythonPath" };
    }
    const tried: string[] = [];
    for (const folder of input.workspaceFolders) {
        const script = path.join(folder, ".venv", scriptDir(platform), tachy);
        tried.push(script);
        if (input.isExecutable(script)) {
            return { command: script, args: ["serve"], source: ".venv" };
        }
    }
    const separator = platform === "win32" ? ";" : ":";
    for (const dir of (input.envPath ?? "").split(separator)) {
        if (!dir) {
            continue;
        }
        const script = path.join(dir, tachy);
        if (input.isExecutable(script)) {
            return { command: script, args: ["serve"], source: "PATH" };
        }
    }
    tried.push("tachy on PATH");
    throw new DiscoveryError(
        `no tachy server found (tried ${tried.join(", ")}); set tachy.serverPath to the ` +
            "tachy executable or tachy.pythonPath to a Python environment with tachy installed",
    );
}
