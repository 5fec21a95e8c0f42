// What an identity provider says about a user, made into what the rest of the API accepts. The ID
// token's claims are the provider's, not ours: a `name` may hold a NUL (PostgreSQL cannot store it:
// the sign-in was a 500), newlines or other control characters (stored as the account's name, they
// forge lines wherever it is shown), or a whole page of text. The account's name follows the rule of
// every name the API takes (http/validate.ts humanName): one line, no control characters, at most 100
// characters; the subject is an identifier and is used exactly as given, or refused.

/** The longest account name taken from a claim (as keys' names). */
export const NAME_MAX = 100;
/** OpenID Connect Core §2: `sub` is at most 255 ASCII characters. */
const SUBJECT_MAX = 255;

// C0 and C1 controls, the line and paragraph separators, unpaired surrogates.
const UNSHOWABLE =
  /[\p{Cc}\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/gu;

/** The claim as a one-line name (control characters as spaces, spaces collapsed), or '' if none is left. */
export function cleanName(value: unknown): string {
  if (typeof value !== 'string') return '';
  const line = value.replace(UNSHOWABLE, ' ').replace(/\s+/gu, ' ').trim();
  // Cut by code points, so a character outside the BMP is never split in half.
  return Array.from(line).slice(0, NAME_MAX).join('').trim();
}

/** The account's name: the first of name, email, preferred_username that leaves a name, else the subject. */
export function accountName(claims: Record<string, unknown>, subject: string): string {
  for (const claim of [claims.name, claims.email, claims.preferred_username]) {
    const name = cleanName(claim);
    if (name) return name;
  }
  return cleanName(subject) || 'user';
}

/** Why a subject cannot identify an account (undefined: it can). */
export function subjectProblem(subject: string): string | undefined {
  if (!subject) return 'the identity provider returned an empty subject (sub)';
  if (subject.length > SUBJECT_MAX)
    return `the identity provider's subject (sub) is longer than ${SUBJECT_MAX} characters`;
  if (/[\p{Cc}]/u.test(subject) || /[\ud800-\udfff]/u.test(subject))
    return "the identity provider's subject (sub) contains control characters";
  return undefined;
}
