import { useState } from 'react';
import { api, type Tool } from '../api.ts';
import { ErrorText, TableScroll, usePolling } from '../ui.tsx';

export function Tools() {
  const tools = usePolling(() => api.tools(), 30_000);
  const [error, setError] = useState<string | null>(null);
  const toggle = async (t: Tool) => {
    setError(null);
    try {
      await (t.enabled ? api.disableTool(t.tool_id) : api.enableTool(t.tool_id));
      tools.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <>
      <h1>Tools</h1>
      <p>
        Managed tools your models may call. An enabled tool is billed per call; a key&apos;s tool pin narrows
        what it may use.
      </p>
      <ErrorText error={error ?? tools.error} />
      {tools.data && tools.data.data.length === 0 && <p>No managed tools are offered.</p>}
      {tools.data && tools.data.data.length > 0 && (
        <TableScroll label="Managed tools">
          <table>
            <caption className="sr-only">Managed tools</caption>
            <thead>
              <tr>
                <th scope="col">Tool</th>
                <th scope="col">Kind</th>
                <th scope="col">What it does</th>
                <th scope="col">Price per call</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span className="sr-only">Enable or disable</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {tools.data.data.map((t) => (
                <tr key={t.tool_id} data-testid={`tool-${t.tool_id}`}>
                  <td>
                    <code>{t.tool_id}</code>
                  </td>
                  <td>{t.kind}</td>
                  <td>{t.description}</td>
                  <td>{t.price_per_call}</td>
                  <td>{t.enabled ? 'enabled' : 'disabled'}</td>
                  <td>
                    <button
                      type="button"
                      className={t.enabled ? 'secondary' : undefined}
                      onClick={() => void toggle(t)}
                    >
                      {t.enabled ? `Disable ${t.tool_id}` : `Enable ${t.tool_id}`}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
    </>
  );
}
