export function requiredMajor(): number | undefined;
export function nodeVersionProblem(version?: string, required?: number): string | undefined;
