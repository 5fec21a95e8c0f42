// Tests read JSON bodies and assert on their shape with expect(); typing each one adds nothing.
declare global {
  interface Response {
    json(): Promise<any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  }
}
export {};
