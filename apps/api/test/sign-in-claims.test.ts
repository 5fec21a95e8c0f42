// The identity provider's claims made into an account name the rest of the API accepts (one line, no
// control characters, at most 100 characters), and subjects that cannot identify an account.
import { describe, expect, it } from 'vitest';
import { accountName, cleanName, subjectProblem } from '../src/accounts/sign-in/claims.ts';
import { humanName } from '../src/http/validate.ts';

describe('cleanName', () => {
  it.each([
    ['Ada Lovelace', 'Ada Lovelace'],
    ['Eve\u0000Admin', 'Eve Admin'],
    ['  Eve\r\n\tAdmin\u2028root \u0085 ', 'Eve Admin root'],
    ['\u0000\u0001\n', ''],
    ['a\ud800b', 'a b'],
    ['😀'.repeat(150), '😀'.repeat(100)],
    [42, ''],
  ])('%j → %j', (claim, name) => {
    expect(cleanName(claim)).toBe(name);
  });

  it('whatever it is given, its answer is a name humanName(100) accepts (or empty)', () => {
    const hostile = ['\u0000', 'x'.repeat(10_000), 'a\nb\u0007c', ' \u00a0 ', 'ok\ud83d', '\u200bzero'];
    for (const claim of hostile) {
      const name = cleanName(claim);
      if (name) expect(humanName(100).safeParse(name).success, JSON.stringify(claim)).toBe(true);
    }
  });
});

describe('accountName', () => {
  it('takes name, then email, then preferred_username, then the subject — the first that leaves a name', () => {
    expect(accountName({ name: 'Ada', email: 'a@x' }, 's')).toBe('Ada');
    expect(accountName({ name: '\u0000\n', email: 'a@x' }, 's')).toBe('a@x');
    expect(accountName({ preferred_username: 'ada' }, 's')).toBe('ada');
    expect(accountName({}, 'sub-1')).toBe('sub-1');
  });
});

describe('subjectProblem', () => {
  it('refuses what cannot be stored or is not an OpenID subject; takes any other', () => {
    expect(subjectProblem('248289761001')).toBeUndefined();
    expect(subjectProblem('a\u0000b')).toBe(
      "the identity provider's subject (sub) contains control characters",
    );
    expect(subjectProblem('a\nb')).toBe("the identity provider's subject (sub) contains control characters");
    expect(subjectProblem('x'.repeat(256))).toBe(
      "the identity provider's subject (sub) is longer than 255 characters",
    );
    expect(subjectProblem('')).toBe('the identity provider returned an empty subject (sub)');
  });
});
