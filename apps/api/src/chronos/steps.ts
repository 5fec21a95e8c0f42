// A Chronos run's body: name, schedule, timezone and steps, validated at the edge (400
// validation_error naming the field), and the one template syntax a step uses to read the outputs
// of the steps before it: `{{steps.N.output}}` (N counts from 0), inside a chat message's content or
// any string of a tool step's input.
import { z } from 'zod';
import { humanName } from '../http/validate.ts';
import { isTimeZone, parseCron } from './cron.ts';

/** The most steps one run may have: each may take the whole 13-minute wall clock. */
export const MAX_STEPS = 10;

const required = (what: string) => (issue: { input: unknown }) =>
  issue.input === undefined ? 'is required' : `must be ${what}`;

/** Longer than any cron expression a person writes (`0,15,30,45 8-18/2 1-7,15 jan-jun mon-fri` is 39). */
const SCHEDULE_MAX = 100;

export const scheduleField = z
  .string({ error: required('a string such as "0 3 * * *" or "@hourly"') })
  .trim()
  .max(SCHEDULE_MAX, `must be at most ${SCHEDULE_MAX} characters`)
  .regex(/^[^\p{Cc}\u2028\u2029]*$/u, 'must be on one line, without control characters')
  .superRefine((v, ctx) => {
    const r = parseCron(v);
    if (!r.ok) ctx.addIssue({ code: 'custom', message: r.message });
  })
  .describe('5-field cron expression (minute hour day-of-month month day-of-week) or @hourly, @daily, …');

export const timezoneField = z
  .string({ error: required('an IANA time zone name such as "Europe/Berlin"') })
  .refine(isTimeZone, 'must be an IANA time zone name such as "Europe/Berlin" or "UTC"')
  .describe('IANA time zone the schedule is read in');

const nameField = z
  .string({ error: required('a string') })
  .pipe(humanName(200))
  .describe('Human-readable name of the run');

const message = z.strictObject({
  role: z.enum(['system', 'user', 'assistant'], { error: 'must be "system", "user" or "assistant"' }),
  content: z
    .string({ error: required('a string') })
    .max(100_000, 'must be at most 100000 characters')
    .describe('May contain {{steps.N.output}}'),
});

export const chatStep = z.strictObject({
  type: z.literal('chat'),
  model: z
    .string({ error: required('a catalog model name, or "auto", "olympus" or "olympus-auto"') })
    .min(1, 'must not be empty')
    .max(200, 'must be at most 200 characters')
    .describe(
      'A catalog model (GET /api/models) or `auto` (also `olympus`, `olympus-auto`, as on live requests): Olympus chooses when the step runs, as for a live request with these messages (the policy, its routes, the models’ state); needs Olympus enabled',
    ),
  messages: z
    .array(message, { error: required('an array of messages') })
    .min(1, 'must have at least one message')
    .max(100, 'must have at most 100 messages'),
  max_tokens: z
    .number({ error: required('a whole number') })
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(1_000_000, 'must be at most 1000000'),
});

export const toolStep = z.strictObject({
  type: z.literal('tool'),
  tool_id: z
    .string({ error: required('a managed tool id') })
    .regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be a managed tool id (GET /api/tools)'),
  name: z
    .string({ error: 'must be a string' })
    .min(1, 'must not be empty')
    .max(200, 'must be at most 200 characters')
    .optional()
    .describe('The MCP tool to call; may be left out when the server has one tool'),
  input: z
    .record(z.string(), z.unknown(), { error: 'must be a JSON object' })
    .default({})
    .describe('The MCP tool arguments; any string may contain {{steps.N.output}}'),
});

export const stepSchema = z.discriminatedUnion('type', [chatStep, toolStep], {
  error: 'must be "chat" or "tool"',
});

export type Step = z.infer<typeof stepSchema>;
export type ChatStep = z.infer<typeof chatStep>;
export type ToolStep = z.infer<typeof toolStep>;

const TEMPLATE = /\{\{\s*steps\.(\d+)\.output\s*\}\}/g;

/** Every string a step's templates may sit in, with where it is (for the error's field name). */
function templatedStrings(step: Step): { path: (string | number)[]; text: string }[] {
  if (step.type === 'chat')
    return step.messages.map((m, i) => ({ path: ['messages', i, 'content'], text: m.content }));
  const out: { path: (string | number)[]; text: string }[] = [];
  const walk = (v: unknown, path: (string | number)[]) => {
    if (typeof v === 'string') out.push({ path, text: v });
    else if (Array.isArray(v)) v.forEach((x, i) => walk(x, [...path, i]));
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, [...path, k]);
  };
  walk(step.input, ['input']);
  return out;
}

export const stepsField = z
  .array(stepSchema, { error: required('an array of steps') })
  .min(1, 'must have at least one step')
  .max(MAX_STEPS, `must have at most ${MAX_STEPS} steps`)
  .superRefine((steps, ctx) => {
    steps.forEach((step, i) => {
      for (const { path, text } of templatedStrings(step))
        for (const m of text.matchAll(TEMPLATE)) {
          if (Number(m[1]) < i) continue;
          const before =
            i === 0
              ? 'the first step has no step before it'
              : i === 1
                ? 'step 1 can use {{steps.0.output}} only'
                : `step ${i} can use {{steps.0.output}} … {{steps.${i - 1}.output}}`;
          ctx.addIssue({
            code: 'custom',
            path: [i, ...path],
            message: `refers to ${m[0]}; a step can only use the outputs of the steps before it (${before})`,
          });
          return;
        }
    });
  })
  .describe('Ordered chat and tool steps');

export const createRunBody = z.strictObject({
  name: nameField,
  schedule: scheduleField,
  timezone: timezoneField,
  steps: stepsField,
});

export const patchRunBody = z
  .strictObject({
    name: nameField.optional(),
    schedule: scheduleField.optional(),
    timezone: timezoneField.optional(),
    steps: stepsField.optional(),
  })
  .refine(
    (b) => Object.keys(b).length > 0,
    'The request body must change at least one of name, schedule, timezone, steps',
  );

/** A step with `{{steps.N.output}}` replaced by the outputs so far (strings, recursively in input). */
export function renderStep(step: Step, outputs: readonly string[]): Step {
  const render = (text: string) => text.replace(TEMPLATE, (_, n: string) => outputs[Number(n)] ?? '');
  if (step.type === 'chat')
    return { ...step, messages: step.messages.map((m) => ({ ...m, content: render(m.content) })) };
  const walk = (v: unknown): unknown =>
    typeof v === 'string'
      ? render(v)
      : Array.isArray(v)
        ? v.map(walk)
        : v && typeof v === 'object'
          ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]))
          : v;
  return { ...step, input: walk(step.input) as Record<string, unknown> };
}
