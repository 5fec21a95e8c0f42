// A request body forwarded unchanged goes upstream as the bytes it came as (http/body-bytes.ts): kept
// only when they mean what JSON.stringify of the parsed object would, and a member appended on the
// bytes parses to the same object as the spread the proxy would otherwise serialise.
import { describe, expect, it } from 'vitest';
import { bodyBytes, bodyBytesWith, keepBodyBytes, withMember } from '../src/http/body-bytes.ts';

const kept = (text: string | Buffer) => {
  const buf = Buffer.isBuffer(text) ? text : Buffer.from(text);
  const body = JSON.parse(buf.toString('utf8').replace(/^\uFEFF/, '')) as Record<string, unknown>;
  keepBodyBytes(body, buf);
  return { body, buf };
};

describe('request body bytes', () => {
  it('are the bytes the body came as, for that object only', () => {
    const { body, buf } = kept('{ "model" : "m",\n "messages": [{"role":"user","content":"h\\u00e9"}] }');
    expect(bodyBytes(body)).toBe(buf);
    expect(bodyBytes({ ...body })).toBeUndefined();
  });

  it('are not kept with a byte-order mark, in another encoding than UTF-8, or for arrays', () => {
    expect(bodyBytes(kept('\uFEFF{"a":1}').body)).toBeUndefined();
    const latin1 = Buffer.concat([Buffer.from('{"a":"'), Buffer.from([0xe9]), Buffer.from('"}')]);
    const body = { a: '\ufffd' };
    keepBodyBytes(body, latin1);
    expect(bodyBytes(body)).toBeUndefined();
    const list = [1];
    keepBodyBytes(list, Buffer.from('[1]'));
    expect(bodyBytes(list as unknown as object)).toBeUndefined();
  });

  it('with a member appended parse to the spread body, whatever the spacing', () => {
    const options = { include_usage: true, continuous_usage_stats: true };
    for (const text of [
      '{"model":"m","stream":true}',
      '{ "stream" : true }\r\n\t ',
      '{"a":{"b":[1,{}]},"stream":true}',
    ]) {
      const { body } = kept(text);
      const out = bodyBytesWith(
        body,
        'stream_options',
        Buffer.from(`,"stream_options":${JSON.stringify(options)}`),
      );
      expect(JSON.parse(out!.toString('utf8'))).toEqual({ ...body, stream_options: options });
      expect(Object.keys(JSON.parse(out!.toString('utf8')))).toEqual(
        Object.keys({ ...body, stream_options: options }),
      );
    }
  });

  it('with a member appended are undefined when the member is there already, or the object is empty', () => {
    expect(
      bodyBytesWith(
        kept('{"stream":true,"stream_options":null}').body,
        'stream_options',
        Buffer.from(',"stream_options":{}'),
      ),
    ).toBeUndefined();
    expect(
      bodyBytesWith(kept('{ }').body, 'stream_options', Buffer.from(',"stream_options":{}')),
    ).toBeUndefined();
    expect(
      bodyBytesWith({ stream: true }, 'stream_options', Buffer.from(',"stream_options":{}')),
    ).toBeUndefined();
  });
});

describe('withMember(): the body with one string member set, its bytes made from the client’s', () => {
  /** The bytes withMember kept parse to the object it returned (what JSON.stringify would send). */
  const same = (next: Record<string, unknown>) =>
    expect(JSON.parse(bodyBytes(next)!.toString())).toEqual(next);

  it('replaces the top-level value on the bytes, either spacing, leaving everything else as sent', () => {
    for (const text of [
      '{"model":"catalog-m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}',
      '{ "messages": [ ], "model" :  "catalog-m" , "stream": true }',
    ]) {
      const { body } = kept(text);
      const next = withMember(body, 'model', 'org/served');
      expect(next).toEqual({ ...body, model: 'org/served' });
      same(next);
      expect(bodyBytes(next)!.toString()).toBe(text.replace('"catalog-m"', '"org/served"'));
    }
  });

  it('appends the member when the body has none', () => {
    const { body } = kept('{"messages":[]}');
    const next = withMember(body, 'model', 'org/served');
    expect(bodyBytes(next)!.toString()).toBe('{"messages":[],"model":"org/served"}');
  });

  it('keeps no bytes where the member found might not be the top-level one: the object is still right', () => {
    for (const text of [
      // the key nested too (a tool's schema), or the name as a value elsewhere
      '{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"model":{"type":"string"}}}}}]}',
      '{"model":"m","messages":[{"role":"user","content":"model"}]}',
      // a \\u escape (another spelling of a key), a value spelled with an escape, a non-string value
      '{"mod\\u0065l":"m","messages":[]}',
      '{"model":"a\\/b","messages":[]}',
      '{"model":7}',
      // duplicate keys: JSON.parse keeps the last
      '{"model":"x","model":"m"}',
    ]) {
      const { body } = kept(text);
      const next = withMember(body, 'model', 'org/served');
      expect(next).toEqual({ ...body, model: 'org/served' });
      expect(bodyBytes(next)).toBeUndefined();
    }
  });

  it('keeps no bytes for a body that came without them (a rewritten object)', () => {
    const next = withMember({ model: 'm' }, 'model', 'x');
    expect(next).toEqual({ model: 'x' });
    expect(bodyBytes(next)).toBeUndefined();
  });
});
