// The request every OCR measurement sends: one line of black text on white, as PNG base64.
import sharp from 'sharp';

export const IMAGE_TEXT = 'HELLO EMBERS 2026';

export async function testImage(): Promise<string> {
  const svg =
    '<svg width="480" height="96" xmlns="http://www.w3.org/2000/svg"><rect width="100%" height="100%" fill="white"/>' +
    `<text x="16" y="60" font-size="40" font-family="DejaVu Sans">${IMAGE_TEXT}</text></svg>`;
  return (await sharp(Buffer.from(svg)).png().toBuffer()).toString('base64');
}

/** The recognised text of an ocr answer, lines joined by " | ". */
export function ocrText(output: unknown): string {
  const lines = (output as { lines?: { text: string }[] } | null)?.lines;
  return Array.isArray(lines) ? lines.map((l) => l.text).join(' | ') : `unexpected: ${JSON.stringify(output).slice(0, 200)}`;
}
