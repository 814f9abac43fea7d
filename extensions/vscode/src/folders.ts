// Which folder the server indexes. With workspace folders open, those (the client
// sends them). With none (a file opened on its own), the directory of the active
// file, as language servers do for a single file; never the home directory or the
// file system root, which would index everything. Pure, for the unit tests.

import * as path from "node:path";

export interface FolderInput {
    workspaceFolders: string[]; // URIs of the open workspace folders, of any scheme
    activeFile?: string; // the active editor's file system path, for a file: document
    home?: string;
}

/** The directory to hand the server as its only workspace folder, or undefined:
 * folders are open, no file is active, or its directory is ~ or /. */
export function fallbackFolder(input: FolderInput): string | undefined {
    if (input.workspaceFolders.length > 0 || !input.activeFile) {
        return undefined;
    }
    const dir = path.dirname(path.resolve(input.activeFile));
    if (dir === path.parse(dir).root || (input.home !== undefined && dir === path.resolve(input.home))) {
        return undefined;
    }
    return dir;
}
