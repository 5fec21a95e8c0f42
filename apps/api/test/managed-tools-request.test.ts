// The request side of managed tools on the Elastic routes: which `tools` entries are managed, the
// refusals naming the field, and the Responses API's input as chat messages.
import { describe, expect, it } from 'vitest';
import { managedTools } from '../src/tools/answer.ts';
import { responsesToChat } from '../src/tools/responses.ts';

describe('managedTools()', () => {
  it('splits mcp entries from the others, in order; none: undefined (an ordinary call)', () => {
    const fn = { type: 'function', function: { name: 'f' } };
    expect(managedTools(undefined)).toBeUndefined();
    expect(managedTools([fn])).toBeUndefined();
    expect(
      managedTools([
        { type: 'mcp', server_label: 'a' },
        fn,
        { type: 'mcp', server_label: 'b', allowed_tools: ['x'] },
        { type: 'mcp', server_label: 'c', allowed_tools: { tool_names: ['y'] } },
      ]),
    ).toEqual({
      managed: [{ toolId: 'a' }, { toolId: 'b', allowedTools: ['x'] }, { toolId: 'c', allowedTools: ['y'] }],
      others: [fn],
    });
  });

  it('refuses bad entries naming the field', () => {
    const cases: [unknown[], string][] = [
      [[{ type: 'mcp' }], 'tools.0.server_label'],
      [[{ type: 'function' }, { type: 'mcp', server_label: '' }], 'tools.1.server_label'],
      [[{ type: 'mcp', server_label: 'a', server_url: 'https://x' }], 'tools.0.server_url'],
      [[{ type: 'mcp', server_label: 'a', connector_id: 'c' }], 'tools.0.connector_id'],
      [[{ type: 'mcp', server_label: 'a', allowed_tools: [1] }], 'tools.0.allowed_tools'],
      [[{ type: 'mcp', server_label: 'a', allowed_tools: 'x' }], 'tools.0.allowed_tools'],
    ];
    for (const [tools, param] of cases)
      expect(() => managedTools(tools), param).toThrow(
        expect.objectContaining({ status: 400, code: 'validation_error', param }),
      );
  });
});

describe('responsesToChat()', () => {
  it('instructions, string input, function tools and limits as a chat body', () => {
    expect(
      responsesToChat(
        {
          instructions: 'Be brief',
          input: 'Hi',
          max_output_tokens: 20,
          temperature: 0,
          tool_choice: { type: 'function', name: 'f' },
        },
        [{ type: 'function', name: 'f', parameters: { type: 'object' } }],
      ),
    ).toEqual({
      messages: [
        { role: 'system', content: 'Be brief' },
        { role: 'user', content: 'Hi' },
      ],
      max_tokens: 20,
      temperature: 0,
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
    });
  });

  it('input items: messages with content parts, the client’s function calls and their outputs', () => {
    const chat = responsesToChat(
      {
        input: [
          { role: 'developer', content: 'Rules' },
          {
            type: 'message',
            role: 'user',
            content: [
              { type: 'input_text', text: 'Look ' },
              { type: 'input_text', text: 'up' },
            ],
          },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: 'found' },
        ],
      },
      [],
    );
    expect(chat.messages).toEqual([
      { role: 'system', content: 'Rules' },
      { role: 'user', content: 'Look up' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'found' },
    ]);
  });

  it('refuses what it cannot carry, naming the field', () => {
    expect(() => responsesToChat({ input: 3 }, [])).toThrow(expect.objectContaining({ param: 'input' }));
    expect(() => responsesToChat({ input: [{ type: 'reasoning' }] }, [])).toThrow(
      expect.objectContaining({ param: 'input.0' }),
    );
    expect(() => responsesToChat({ input: 'x' }, [{ type: 'web_search' }])).toThrow(
      expect.objectContaining({ param: 'tools.0' }),
    );
  });
});
