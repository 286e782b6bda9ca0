// The bundler loads .txt imports as their text (esbuild `loader: { '.txt': 'text' }`).
declare module '*.txt' {
  const text: string;
  export default text;
}
