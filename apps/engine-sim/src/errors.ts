// vLLM's error shapes, messages and start-up failure output. The body is vLLM's ErrorResponse:
// `{"error": {"message", "type", "param", "code"}}` with `code` the numeric HTTP status.

export interface VllmError {
  status: number;
  type: string;
  message: string;
  param: string | null;
}

export function errorBody(e: VllmError): string {
  return JSON.stringify({ error: { message: e.message, type: e.type, param: e.param, code: e.status } });
}

/** Request validation failures go through vLLM's RequestValidationError handler: type "Bad Request". */
export function validationError(message: string, param: string | null = null): VllmError {
  return { status: 400, type: 'Bad Request', message, param };
}

export function badRequest(message: string, param: string | null = null): VllmError {
  return { status: 400, type: 'BadRequestError', message, param };
}

export function modelNotFound(model: string): VllmError {
  return {
    status: 404,
    type: 'NotFoundError',
    message: `The model \`${model}\` does not exist.`,
    param: 'model',
  };
}

// vLLM's VLLMValidationError renders its parameter and value after the message.
function withParam(message: string, parameter: string, value: number): string {
  return `${message} (parameter=${parameter}, value=${value})`;
}

export function promptTooLong(maxModelLen: number, promptTokens: number): VllmError {
  return badRequest(
    withParam(
      `This model's maximum context length is ${maxModelLen} tokens. However, your request has ` +
        `${promptTokens} input tokens. Please reduce the length of the input messages.`,
      'input_tokens',
      promptTokens,
    ),
    'input_tokens',
  );
}

export function maxTokensTooLarge(maxModelLen: number, promptTokens: number, maxTokens: number): VllmError {
  return badRequest(
    withParam(
      `'max_tokens' or 'max_completion_tokens' is too large: ${maxTokens}. This model's maximum context ` +
        `length is ${maxModelLen} tokens and your request has ${promptTokens} input tokens ` +
        `(${maxTokens} > ${maxModelLen} - ${promptTokens}).`,
      'max_tokens',
      maxTokens,
    ),
    'max_tokens',
  );
}

const STATUS_TYPES: Record<number, [string, string]> = {
  500: ['InternalServerError', 'Internal server error'],
  501: ['NotImplementedError', 'Not Implemented'],
  502: ['BadGatewayError', 'Bad Gateway'],
  503: ['ServiceUnavailableError', 'Service Unavailable'],
  504: ['GatewayTimeoutError', 'Gateway Timeout'],
  429: ['RateLimitError', 'Too Many Requests'],
};

/** An injected failure (`--fail-status`, `x-sim-fail`). */
export function injectedFailure(status: number): VllmError {
  const [type, message] = STATUS_TYPES[status] ?? [
    status >= 500 ? 'InternalServerError' : 'BadRequestError',
    `Simulated failure ${status}`,
  ];
  return { status, type, message, param: null };
}

export function notReady(): VllmError {
  return {
    status: 503,
    type: 'ServiceUnavailableError',
    message: 'The model is still loading.',
    param: null,
  };
}

export function shuttingDown(): VllmError {
  return {
    status: 503,
    type: 'ServiceUnavailableError',
    message: 'The server is shutting down.',
    param: null,
  };
}

// --- start-up failures, printed to stderr as vLLM prints them before exiting with status 1 ---

function logTime(d: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function vllmLogLine(level: 'INFO' | 'WARNING' | 'ERROR', source: string, message: string): string {
  return `${level} ${logTime(new Date())} [${source}] ${message}\n`;
}

export function cudaOomMessage(): string {
  return (
    vllmLogLine('ERROR', 'core.py:708', 'EngineCore failed to start.') +
    'Traceback (most recent call last):\n' +
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 699, in run_engine_core\n' +
    '    engine_core = EngineCoreProc(*args, **kwargs)\n' +
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1987, in load_model\n' +
    '    self.model = model_loader.load_model(\n' +
    '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1355, in convert\n' +
    '    return t.to(\n' +
    'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity ' +
    'of 22.05 GiB of which 512.44 MiB is free. Including non-PyTorch memory, this process has 21.54 GiB ' +
    'memory in use. Of the allocated memory 21.26 GiB is allocated by PyTorch, and 29.83 MiB is reserved ' +
    'by PyTorch but unallocated. If reserved but unallocated memory is large try setting ' +
    'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for ' +
    'Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n' +
    'RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n'
  );
}

export function gatedRepoMessage(model: string): string {
  const url = `https://huggingface.co/${model}/resolve/main/config.json`;
  return (
    'Traceback (most recent call last):\n' +
    '  File "/usr/local/lib/python3.12/dist-packages/huggingface_hub/utils/_http.py", line 409, in hf_raise_for_status\n' +
    '    response.raise_for_status()\n' +
    `requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: ${url}\n` +
    '\n' +
    'The above exception was the direct cause of the following exception:\n' +
    '\n' +
    'Traceback (most recent call last):\n' +
    '  File "/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py", line 424, in cached_files\n' +
    '    hf_hub_download(\n' +
    `huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-00000000-sim)\n` +
    '\n' +
    `Cannot access gated repo for url ${url}.\n` +
    `Access to model ${model} is restricted. You must have access to it and be authenticated to access it. ` +
    'Please log in.\n'
  );
}

/** An OpenAI-style 429 from a simulator at its --capacity, like an overloaded hosted upstream. */
export function atCapacity(capacity: number): VllmError {
  return {
    status: 429,
    type: 'rate_limit_error',
    message: `The engine is at capacity (${capacity} requests in flight). Please retry after a short wait.`,
    param: null,
  };
}

/** OpenAI's error body, with a string `code` (vLLM's own errors carry the numeric status). */
export function openaiErrorBody(e: VllmError, code: string): string {
  return JSON.stringify({ error: { message: e.message, type: e.type, param: e.param, code } });
}

export function embeddingInputTooLong(maxModelLen: number, tokens: number): VllmError {
  return badRequest(
    `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${tokens} ` +
      'tokens in the input for embedding generation. Please reduce the length of the input.',
    'input',
  );
}

export function responseNotFound(id: string): VllmError {
  return {
    status: 404,
    type: 'invalid_request_error',
    message: `Response with id '${id}' not found.`,
    param: null,
  };
}

export function backgroundNotSupported(): VllmError {
  return {
    status: 400,
    type: 'invalid_request_error',
    message:
      'This vLLM engine does not support `store=True` and therefore does not support the background mode. ' +
      'To enable these features, set the environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when ' +
      'launching the vLLM server.',
    param: null,
  };
}
