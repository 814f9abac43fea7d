// tachy/search results as QuickPick items.

import type { SearchItem } from "./lsp_ext";

export interface PickItem {
    label: string;
    description: string;
    detail: string;
    alwaysShow: boolean; // the server ranked it: the quick pick must not filter it out
    item: SearchItem;
}

/** `uri` relative to the workspace folder holding it (the full path otherwise). */
export function relativePath(uri: string, folders: string[]): string {
    const path = decodeURIComponent(uri.replace(/^file:\/\//, ""));
    let best = "";
    for (const folder of folders) {
        const root = decodeURIComponent(folder.replace(/^file:\/\//, "")).replace(/\/$/, "");
        if (path.startsWith(`${root}/`) && root.length > best.length) {
            best = root;
        }
    }
    return best ? path.slice(best.length + 1) : path;
}

export function pickItems(results: SearchItem[], folders: string[]): PickItem[] {
    return results.map((item) => {
        const where = `${relativePath(item.uri, folders)}:${item.range.start.line + 1}`;
        const firstLine = item.snippet.split("\n").find((l) => l.trim()) ?? "";
        return {
            label: item.symbol ? `$(symbol-function) ${item.symbol}` : `$(file-code) ${where}`,
            description: item.symbol ? where : "",
            detail: firstLine.trim(),
            alwaysShow: true,
            item,
        };
    });
}
